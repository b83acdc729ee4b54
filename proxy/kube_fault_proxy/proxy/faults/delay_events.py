"""delayEvents: a lagging watch. Every selected event reaches the client, in order, that much later.

What an HA apiserver whose watch cache is behind etcd does (kubernetes#97294, #59848): nothing is lost,
nothing reordered, everything late. An event that is not selected (and a BOOKMARK) is held behind the
events ahead of it, so the stream's order is the apiserver's; with nothing held it passes at once.
Held events leave when due: the proxy wakes the stream on a timer (`mitm/patches/stream_ticks.py`), not only
when the apiserver sends more. At most `maxHeldEvents` are held: one more releases the oldest early
(journaled `delay-cap`). When the apiserver ends the watch, what is held is delivered at once.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable
from typing import Annotated, Any, ClassVar

from pydantic import Field

from kube_fault_proxy.proxy.faults.base import Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import EditEvents, Plan
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.requests.watch import EventEditor, EventSelector, WatchEvent


class DelayEditor(EventEditor):
    """One watch's held events, (due time, line, when it arrived, selected), in the stream's order."""

    def __init__(self, selector: EventSelector, seconds: float, jitter: float, max_held: int,
                 rng: random.Random, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.selected = selector.compile()
        self.seconds, self.jitter, self.max_held = seconds, jitter, max_held
        self.rng, self.clock = rng, clock
        self.held: deque[tuple[float, bytes, float, bool]] = deque()

    def describe(self) -> str:
        jitter = f" (+ up to {self.jitter:g}s)" if self.jitter else ""
        return f"delay selected events {self.seconds:g}s{jitter} (at most {self.max_held} held)"

    def edit(self, line: bytes, event: WatchEvent | None) -> list[bytes]:
        now = self.clock()
        out = self._release(now, "due")
        chosen = event is not None and event.type != "ERROR" and self.selected(event)
        if not chosen and not self.held:
            return [*out, line]
        due = now + self.seconds + (self.rng.uniform(0, self.jitter) if self.jitter else 0.0) if chosen else now
        if self.held:
            due = max(due, self.held[-1][0])  # never ahead of an event held before it
        self.held.append((due, line, now, chosen))
        if len(self.held) > self.max_held:
            early = len(self.held) - self.max_held
            self.records.append({"action": "delay-cap", "held": len(self.held), "released": early})
            out += self._pop(early, now, "cap")
        return out

    def next_due(self) -> float | None:
        return self.held[0][0] if self.held else None

    def tick(self) -> list[bytes]:
        return self._release(self.clock(), "due")

    def at_end(self) -> list[bytes]:
        return self._pop(len(self.held), self.clock(), "end")

    def release(self) -> list[bytes]:
        return self._pop(len(self.held), self.clock(), "deactivated")

    def _release(self, now: float, reason: str) -> list[bytes]:
        n = 0
        for due, _, _, _ in self.held:
            if due > now:
                break
            n += 1
        return self._pop(n, now, reason) if n else []

    def _pop(self, n: int, now: float, reason: str) -> list[bytes]:
        if not n:
            return []
        gone = [self.held.popleft() for _ in range(n)]
        chosen = [now - arrived for _, _, arrived, picked in gone if picked]
        self.records.append({"action": "delayed", "reason": reason, "events": len(chosen),
                             "passedBehind": n - len(chosen),
                             "maxLateSeconds": round(max(chosen), 3) if chosen else 0.0,
                             "minLateSeconds": round(min(chosen), 3) if chosen else 0.0})
        return [line for _, line, _, _ in gone]


class DelayEvents(FaultSpec):
    """A lagging watch: events that match `events` reach the client `seconds` (plus jitter) late, in
    order; the rest of the stream keeps its place behind them."""

    kind: ClassVar[str] = "delayEvents"
    traits: ClassVar[Traits] = Traits(acts_on="watch", edits_events=True, duration="seconds", orders_events=True,
                                      order_draw="jitterSeconds")
    search_group: ClassVar[str] = "view"
    searched_by_default: ClassVar[bool] = False
    seconds: Annotated[float, Field(gt=0, le=600)] = Field(
        description="how much later than it arrived each selected event is delivered")
    jitterSeconds: Annotated[float, Field(ge=0, le=600)] = Field(
        0.0, description="up to this much more, drawn per event from the rule's seed (order is kept: an event "
                         "never leaves before one held ahead of it)")
    events: EventSelector = Field(
        EventSelector(), description="which events are delayed (unset fields match anything); the others are "
                                     "held only behind delayed ones, to keep the stream's order")
    maxHeldEvents: Annotated[int, Field(ge=1, le=100_000)] = Field(
        10_000, description="events held at most per watch; one more releases the oldest early (journaled "
                            "as action delay-cap)")

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        """A lagging watch cache: seconds, as HA apiservers lag."""
        lag: dict[str, Any] = {"seconds": float(rng.choice([0.5, 1, 2, 5]))}
        if rng.random() < 0.3:
            lag["jitterSeconds"] = float(rng.choice([0.5, 1]))
        return lag

    def applies_to(self, ident: RequestIdentity) -> bool:
        return ident.watch

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        editor = DelayEditor(self.events, self.seconds, self.jitterSeconds, self.maxHeldEvents,
                             random.Random(rng.getrandbits(64)))
        return Plan(before=(EditEvents(editor),))
