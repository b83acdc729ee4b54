"""Events seen on one watch that another watch waits for (holdEvents: skew between watches).

A held watch registers a waiter for a resource and an event predicate; every JSON watch of that
resource, while a waiter exists, has its lines read (only then: a watch nobody waits on is never
parsed) and each event offered to the waiters, oldest first. A waiter is released once and removed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kube_fault_proxy.proxy.requests.watch import WatchEvent, parse_event

Key = tuple[str, str]  # (group, resource)
MAX_LINE = 1 << 20  # a longer partial line is dropped (its event is not offered)


@dataclass(eq=False, slots=True)
class Waiter:
    """One held watch waiting for an event of `key` that `wanted` accepts."""

    key: Key
    wanted: Callable[[WatchEvent], bool]
    release: Callable[[WatchEvent], None]
    owner: object  # the held watch's editor: its own stream never releases it


class WatchSignals:
    """The waiters, by resource."""

    def __init__(self) -> None:
        self._waiters: dict[Key, list[Waiter]] = {}

    def wait(self, key: Key, wanted: Callable[[WatchEvent], bool], release: Callable[[WatchEvent], None],
             owner: object) -> Waiter:
        """Call `release` with the first event of `key` that `wanted` accepts, on any watch but the owner's."""
        waiter = Waiter(key, wanted, release, owner)
        self._waiters.setdefault(key, []).append(waiter)
        return waiter

    def cancel(self, waiter: Waiter) -> None:
        """Stop waiting (the held watch ended)."""
        waiters = self._waiters.get(waiter.key, [])
        if waiter in waiters:
            waiters.remove(waiter)
        if not waiters:
            self._waiters.pop(waiter.key, None)

    def watching(self, key: Key) -> bool:
        """Whether a watch waits for an event of this resource."""
        return key in self._waiters

    def offer(self, key: Key, event: WatchEvent, source: object = None) -> None:
        """An event passed on a watch of this resource (`source`: that watch's editor, if any): release the
        waiters it satisfies."""
        for waiter in list(self._waiters.get(key, [])):
            if waiter.owner is not source and waiter.wanted(event):
                self.cancel(waiter)
                waiter.release(event)


class LineReader:
    """A watch's bytes as whole lines, read only while someone waits (a partial line at the start is skipped)."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[WatchEvent]:
        """The events completed by this chunk."""
        self._buffer += data
        out: list[WatchEvent] = []
        while (end := self._buffer.find(b"\n")) >= 0:
            event = parse_event(bytes(self._buffer[:end + 1]))
            del self._buffer[:end + 1]
            if event is not None:
                out.append(event)
        if len(self._buffer) > MAX_LINE:
            self._buffer.clear()
        return out

    def reset(self) -> None:
        """Nobody waits: forget the partial line."""
        self._buffer.clear()
