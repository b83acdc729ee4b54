"""Run the control plane with uvicorn on the proxy's own event loop, knowing its connections' transports."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.auto import AutoHTTPProtocol

Client = tuple[str, int]


class Connections:
    """Open client connections by address (ASGI's scope["client"]): the live feed measures how far behind
    a stream is from its transport and aborts one that does not keep up (ASGI itself can do neither)."""

    def __init__(self) -> None:
        self._open: dict[Client, asyncio.Transport] = {}

    def __len__(self) -> int:
        return len(self._open)

    def get(self, client: Client | None) -> asyncio.Transport | None:
        """The transport of a client connection, while it is open."""
        return self._open.get(client) if client is not None else None

    def protocol(self, base: type[asyncio.Protocol] = AutoHTTPProtocol) -> type[asyncio.Protocol]:
        """uvicorn's HTTP protocol, recording each connection here while it is open."""
        registry = self._open

        def connection_made(protocol: Any, transport: asyncio.Transport) -> None:
            base.connection_made(protocol, transport)
            peer = transport.get_extra_info("peername")
            protocol.kfp_client = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None
            if protocol.kfp_client is not None:
                registry[protocol.kfp_client] = transport

        def connection_lost(protocol: Any, exc: Exception | None) -> None:
            registry.pop(getattr(protocol, "kfp_client", None), None)  # type: ignore[arg-type]
            base.connection_lost(protocol, exc)

        return type(f"Tracked{base.__name__}", (base,),
                    {"connection_made": connection_made, "connection_lost": connection_lost})


class _Server(uvicorn.Server):
    """uvicorn that leaves signal handling to the caller (it is not the main program)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class ControlServer:
    """Start and stop the control plane; a profile switch then is a plain assignment."""

    def __init__(self, app: FastAPI, host: str, port: int) -> None:
        self.connections = Connections()
        app.state.connections = self.connections
        config = uvicorn.Config(
            app, host=host, port=port, log_level="warning", lifespan="off", access_log=False,
            http=self.connections.protocol(),
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
