"""/v1/events/stream: the dashboard's live feed as Server-Sent Events."""

from __future__ import annotations

import asyncio
import contextlib

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from starlette.types import Receive, Scope, Send

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
    """Streams one subscription; ends when the client leaves or the feed closes it."""

    media_type = "text/event-stream"

    def __init__(self, feed: Feed) -> None:
        # Not Response.__init__: it would declare a Content-Length for an empty body.
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-store", "X-Accel-Buffering": "no"})
        self._feed = feed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sub = self._feed.subscribe()
        watcher = asyncio.ensure_future(_until_disconnect(receive, sub))
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            await send({"type": "http.response.body", "body": b"retry: 1000\n\n", "more_body": True})
            while (frame := await sub.next()) is not None:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
            if not watcher.done():  # the feed ended it, not the client
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            pass  # the client went away mid-write (ASGI 2.4 servers say so this way)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            self._feed.unsubscribe(sub)


@router.get("/stream", response_class=EventStream, status_code=200, openapi_extra=STREAM_DOC)
async def stream(feed: Feed = FeedDep) -> EventStream:
    """Live dashboard data: state, counters, rates and new journal records, a few times a second."""
    return EventStream(feed)
