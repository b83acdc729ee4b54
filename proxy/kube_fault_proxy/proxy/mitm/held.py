"""Answers the proxy holds after the apiserver gave them, per client connection: they outlive their upstream.
What the fault addon (a delayed answer) and the crash points' addon hold, and what the upstream loss rule asks."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator

from mitmproxy import http

POLL_SECONDS = 0.2  # how often a wait that ends when its client leaves looks


async def wait(flow: http.HTTPFlow, seconds: float, until_client_gone: bool = False) -> bool:
    """Sleep without blocking other requests (checking every POLL_SECONDS whether the client left, when
    `until_client_gone`); False when the client is gone."""
    if not until_client_gone:
        await asyncio.sleep(seconds)
        return flow.client_conn.connected
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while (left := deadline - loop.time()) > 0:
        if not flow.client_conn.connected or flow.error is not None:
            return False
        await asyncio.sleep(min(POLL_SECONDS, left))
    return flow.client_conn.connected


class HeldAnswers:
    """Counts, per client connection, the answers already received from the apiserver that a fault holds
    (a crash point, a delay before returning the response), and runs a callback once the last is relayed.

    The upstream loss rule asks it: a client connection that waits for held answers is drained (no new
    streams, its held answers relayed) rather than closed at once, which would throw those answers away.
    """

    def __init__(self) -> None:
        self._held: dict[str, int] = {}
        self._when_empty: dict[str, Callable[[], None]] = {}

    def count(self, client_id: str) -> int:
        """How many answers are held for this client connection now."""
        return self._held.get(client_id, 0)

    @contextlib.contextmanager
    def holding(self, client_id: str) -> Iterator[None]:
        """One answer held while inside; when the last one for the client ends, its callback is scheduled
        (call_soon: it runs after mitmproxy has written the answer the hook released)."""
        self._held[client_id] = self._held.get(client_id, 0) + 1
        try:
            yield
        finally:
            left = self._held[client_id] - 1
            if left:
                self._held[client_id] = left
            else:
                del self._held[client_id]
                callback = self._when_empty.pop(client_id, None)
                if callback is not None:
                    asyncio.get_running_loop().call_soon(callback)

    def when_empty(self, client_id: str, callback: Callable[[], None]) -> None:
        """Run `callback` once no answer is held for this client (at once, if none is)."""
        if self.count(client_id):
            self._when_empty[client_id] = callback
        else:
            callback()

    def holding_for(self, flow: http.HTTPFlow, held: Awaitable[None]) -> Awaitable[None]:
        """Await a step that holds an answer the apiserver already gave, counted as held for its client (an
        upstream connection lost meanwhile drains the client instead of dropping the answer)."""
        async def run() -> None:
            with self.holding(flow.client_conn.id):
                await held
        return run()
