"""Refuse request bodies above a size with 413, before they are read into memory."""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def too_large(limit: int) -> str:
    """The 413 message."""
    return f"the request body is larger than {limit:,} bytes"


class BodyLimit:
    """ASGI middleware: a declared Content-Length over the limit is answered at once; a body that
    grows past it while streaming fails its reader with the same 413."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            response = JSONResponse({"error": "content too large", "message": too_large(self.max_bytes)},
                                    status_code=413, headers={"Connection": "close"})
            await response(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise HTTPException(413, too_large(self.max_bytes))
            return message

        await self.app(scope, limited, send)
