"""Answers the proxy holds after the apiserver gave them, per client connection: they outlive their upstream."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator


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
