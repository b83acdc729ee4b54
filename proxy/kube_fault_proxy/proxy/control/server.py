"""Run the control plane with uvicorn on the proxy's own event loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI


class _Server(uvicorn.Server):
    """uvicorn that leaves signal handling to the caller (it is not the main program)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ControlServer:
    """Start and stop the control plane; a profile switch then is a plain assignment."""

    def __init__(self, app: FastAPI, host: str, port: int) -> None:
        config = uvicorn.Config(
            app, host=host, port=port, log_level="warning", lifespan="off", access_log=False
        )
        self._server = _Server(config)
        self._app = app
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Return once listening; raises OSError if the port cannot be bound."""
        self._task = asyncio.create_task(self._server.serve(), name="control-plane")
        while not self._server.started:
            if self._task.done():
                with contextlib.suppress(SystemExit):
                    self._task.result()
                raise OSError(f"control plane could not listen on {self._server.config.host}:"
                              f"{self._server.config.port} (in use?)")
            await asyncio.sleep(0.01)

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._server.servers[0].sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """End the dashboard's streams (uvicorn waits for open responses), stop serving, wait for it."""
        feed = getattr(self._app.state, "feed", None)
        if feed is not None:
            feed.close()
        self._server.should_exit = True
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, SystemExit):
                await self._task
