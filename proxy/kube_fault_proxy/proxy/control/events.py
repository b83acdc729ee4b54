"""/v1/events/stream: the dashboard's live feed as Server-Sent Events; a client that does not keep up
(its stream not drained for DRAIN_SECONDS, measured from its transport) is dropped at once."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from starlette.types import Receive, Scope, Send

from kube_fault_proxy.proxy.control.backlog import DRAIN_SECONDS, DrainWatch, unsent_bytes
from kube_fault_proxy.proxy.control.feed import Feed, Subscription
from kube_fault_proxy.proxy.control.feed_schema import STREAM_DOC

router = APIRouter(prefix="/v1/events", tags=["observe"])


async def get_feed(request: Request) -> Feed:
    """The app's feed, made at build time."""
    feed: Feed = request.app.state.feed
    return feed


FeedDep = Depends(get_feed)


async def _until_disconnect(receive: Receive, sub: Subscription) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    sub.close()


class EventStream(Response):
    """Streams one subscription; ends when the client leaves, the feed closes it, or it falls behind."""

    media_type = "text/event-stream"

    def __init__(self, feed: Feed, transport: asyncio.WriteTransport | None,
                 clock: Callable[[], float] = time.monotonic, seconds: float = DRAIN_SECONDS) -> None:
        # Not Response.__init__: it would declare a Content-Length for an empty body.
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
        self._feed = feed
        self._transport = transport  # None when served without one (in-process tests): only writes are timed
        self._watch = DrainWatch(clock, seconds)

    async def _write(self, send: Send, body: bytes) -> bool:
        """Send one frame unless the stream has not drained in time, or the write does not finish in time."""
        self._watch.observe(unsent_bytes(self._transport) if self._transport is not None else 0)
        if self._watch.behind():
            return False
        try:
            await asyncio.wait_for(send({"type": "http.response.body", "body": body, "more_body": True}),
                                   self._watch.remaining())
        except TimeoutError:
            return False
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sub = self._feed.subscribe()
        watcher = asyncio.ensure_future(_until_disconnect(receive, sub))
        kept_up = True
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            kept_up = await self._write(send, b"retry: 1000\n\n")
            while kept_up and (frame := await sub.next()) is not None:
                kept_up = await self._write(send, frame)
            if kept_up and not watcher.done():  # the feed ended it, not the client
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away mid-write (ASGI 2.4 servers say so this way)
        finally:
            if not kept_up:
                self._drop(scope, sub)
                with contextlib.suppress(TimeoutError):  # uvicorn sees the abort before the app returns
                    await asyncio.wait_for(asyncio.shield(watcher), 1.0)
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            self._feed.unsubscribe(sub)

    def _drop(self, scope: Scope, sub: Subscription) -> None:
        """Abort the connection: its buffers and descriptor go now, not once a client that never reads has."""
        host, port = scope.get("client") or ("?", 0)
        self._feed.drop(sub, client=f"{host}:{port}", unsentBytes=self._watch.unsent,
                        seconds=self._watch.seconds)
        if self._transport is not None:
            self._transport.abort()


@router.get("/stream", response_class=EventStream, status_code=200, openapi_extra=STREAM_DOC)
async def stream(request: Request, feed: Feed = FeedDep) -> EventStream:
    """Live dashboard data: state, counters, rates and new journal records, a few times a second."""
    connections = getattr(request.app.state, "connections", None)
    client = (request.client.host, request.client.port) if request.client is not None else None
    return EventStream(feed, connections.get(client) if connections is not None else None)
