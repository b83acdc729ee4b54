"""The dashboard's live feed: sample the runtime on a timer, fan each sample out to subscribers."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from kube_fault_proxy.proxy.runtime import Runtime

ALL = 1 << 30  # journal.since() limit meaning "every record it still holds"
COUNTED = ("requests", "bindsSucceeded", "bindsThrottled", "bindsFailed", "bindsInjected", "injections")


def sse(event: str, seq: int, data: dict[str, Any]) -> bytes:
    """One Server-Sent Events frame (a single data line: JSON never holds a raw newline)."""
    body = json.dumps(data, separators=(",", ":"), default=str)
    return f"event: {event}\nid: {seq}\ndata: {body}\n\n".encode()


def _is_bind(record: dict[str, Any]) -> bool:
    request = record.get("request") or {}
    return bool(request.get("subresource") == "binding" and request.get("verb") == "create")


class Sampler:
    """Turns the runtime's counters and the journal's new records into one update; no timers."""

    def __init__(self, runtime: Runtime, wall: Callable[[], float] = time.time, tail: int = 200) -> None:
        self._runtime = runtime
        self._wall = wall
        self._tail = tail
        self.seq = 0
        self._previous: tuple[float, dict[str, int]] | None = None
        self.outage: dict[str, Any] = {"active": False}
        records = runtime.journal.since(0, ALL)
        self._cursor = records[-1]["seq"] if records else runtime.journal.seq
        self._follow_outage(records)  # an outage that began before the first dashboard connected
        # Like the runtime's own counters, from the proxy's start (as far as the in-memory journal goes).
        self._binds_injected = self._injected_binds(records)

    def _follow_outage(self, records: Iterable[dict[str, Any]]) -> None:
        for r in records:
            if r["event"] == "outage-start":
                self.outage = {"active": True, "startedAt": r["time"], "seconds": r.get("seconds"),
                               "refuse": r.get("refuse"),
                               "clientConnectionsClosed": r.get("clientConnectionsClosed")}
            elif r["event"] == "outage-end":
                ended = {k: v for k, v in r.items() if k not in ("seq", "event", "time")}
                self.outage = {**self.outage, "active": False, "endedAt": r["time"], **ended}

    @staticmethod
    def _injected_binds(records: Iterable[dict[str, Any]]) -> int:
        return sum(1 for r in records if r["event"] == "inject" and _is_bind(r))

    def _totals(self) -> dict[str, int]:
        counters = self._runtime.counters
        return {"requests": counters.requests, "bindsSucceeded": counters.binds_succeeded,
                "bindsThrottled": counters.binds_throttled, "bindsFailed": counters.binds_failed,
                "bindsInjected": self._binds_injected, "injections": sum(counters.injections_total.values())}

    def sample(self) -> dict[str, Any]:
        """The next update: state, totals, per-second rates since the last sample, new journal records."""
        rt = self._runtime
        records = rt.journal.since(self._cursor, ALL)
        if records:
            self._cursor = records[-1]["seq"]
        self._binds_injected += self._injected_binds(records)
        self._follow_outage(records)
        now = rt.clock()
        totals = self._totals()
        rates = dict.fromkeys(COUNTED, 0.0)
        if self._previous is not None and now > self._previous[0]:
            then, before = self._previous
            rates = {k: round((totals[k] - before[k]) / (now - then), 3) for k in COUNTED}
        self._previous = (now, totals)
        stats = rt.stats()
        activations = rt.activations
        active = (activations.active.describe(now) if activations.active is not None
                  else {"profile": None, "epoch": activations.epoch})
        self.seq += 1
        return {
            "seq": self.seq,
            "time": self._wall(),
            "active": active,
            "rules": stats["rules"],
            "totals": totals,
            "rates": rates,
            "connections": stats.get("connections"),
            "outage": self.outage,
            "events": stats["events"],
            "journal": records[-self._tail:],
            "journalSkipped": max(0, len(records) - self._tail),
            "journalSeq": self._cursor,
            "library": [[n, id(rt.library.get(n))] for n in rt.library.names()],
        }

    def recent(self) -> list[dict[str, Any]]:
        """The newest journal records up to the cursor, for a subscriber's first frame."""
        records = self._runtime.journal.since(max(0, self._cursor - self._tail), ALL)
        return [r for r in records if r["seq"] <= self._cursor]


class Subscription:
    """One client's queue of encoded frames; None in it means the stream is over."""

    def __init__(self, maxsize: int) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize)
        self.closed = False

    def offer(self, frame: bytes) -> bool:
        """Queue a frame; False when the client has fallen that far behind."""
        if self.closed:
            return True
        try:
            self.queue.put_nowait(frame)
        except asyncio.QueueFull:
            return False
        return True

    def close(self) -> None:
        """End the stream: whatever is queued is dropped, the reader gets None next."""
        if self.closed:
            return
        self.closed = True
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait(None)

    async def next(self) -> bytes | None:
        """The next frame, or None once closed."""
        return await self.queue.get()


class Feed:
    """Samples only while someone listens, at most 1/interval times a second, one encoding for all."""

    def __init__(self, runtime: Runtime, interval: float = 0.5, backlog: int = 8,
                 wall: Callable[[], float] = time.time) -> None:
        self._runtime = runtime
        self.interval = interval
        self._backlog = backlog
        self._wall = wall
        self._subscribers: set[Subscription] = set()
        self._sampler: Sampler | None = None
        self._last: dict[str, Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def subscribers(self) -> int:
        """How many clients are listening."""
        return len(self._subscribers)

    def subscribe(self) -> Subscription:
        """A new client: its first frame is a snapshot with the recent journal; ticks follow."""
        sub = Subscription(self._backlog + 1)
        if self._closed:
            sub.close()
            return sub
        if self._sampler is None or self._last is None:
            self._sampler = Sampler(self._runtime, self._wall)
            self._last = self._sampler.sample()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="dashboard-feed")
        snapshot = {**self._last, "journal": self._sampler.recent(), "journalSkipped": 0,
                    "interval": self.interval}
        sub.offer(sse("snapshot", snapshot["seq"], snapshot))
        self._subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        """A client is gone; the last one leaving stops the sampling."""
        sub.close()
        self._subscribers.discard(sub)
        if not self._subscribers:
            self._stop()

    def drop(self, sub: Subscription, **why: Any) -> None:
        """A client whose stream does not keep up is gone: counted and journaled (feed-client-dropped)."""
        self.unsubscribe(sub)
        self._runtime.counters.note("feed-client-dropped", **why)

    def tick(self) -> None:
        """Take one sample and hand the same bytes to every subscriber; drop the ones that lag."""
        if self._sampler is None:
            return
        self._last = self._sampler.sample()
        frame = sse("tick", self._last["seq"], self._last)
        for sub in list(self._subscribers):
            if not sub.offer(frame):
                self.unsubscribe(sub)  # it reconnects and starts over from a snapshot

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.tick()

    def _stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._sampler = None
        self._last = None

    def close(self) -> None:
        """End every stream (the server is stopping; uvicorn waits for open responses)."""
        self._closed = True
        for sub in list(self._subscribers):
            self.unsubscribe(sub)
        self._stop()
