"""holdEvents: skew between watches. This watch's events are held while another resource's watch flows.

A controller's pod watch and node watch are separate streams with no order between them: one may run
seconds ahead of the other (the dsk simulation layer for controller tests permutes exactly this). The
race it models: a client acts on one stream's news before the other stream has told it what came first
(a pod placed on a node whose cordon, taint or fuller state is still in the held node stream; a
controller that sees a pod deleted before the node's change that caused it). From the first event of
this watch, every event (bookmarks and errors too, in order) is held until a chosen event has passed on
a watch of `untilEvent.resource` (any client's, through the proxy), or `maxSeconds` have passed,
whichever comes first; then all held events go at once, in order, and the next event starts the next
hold. Each hold is journaled (`watch-event`, action `held`, with the reason it ended).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Annotated, Any, ClassVar

from pydantic import Field

from kube_fault_proxy.proxy.faults.base import Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import EditEvents, Plan
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.requests.watch import EventEditor, EventSelector, WatchEvent
from kube_fault_proxy.proxy.schema.strict import StrictModel
from kube_fault_proxy.proxy.watch_signals import Waiter, WatchSignals


class UntilEvent(StrictModel):
    """The event on another resource's watch that ends a hold."""

    resource: Annotated[str, Field(min_length=1, max_length=63)] = Field(
        description="the other watch's resource (plural, as in a match), e.g. pods")
    group: Annotated[str, Field(max_length=253)] = Field("", description="its API group (empty: the core group)")
    events: EventSelector = Field(EventSelector(), description="which of its events end the hold (unset: any)")


class HoldEditor(EventEditor):
    """One watch's holds: events kept in order until the other watch's event or the time limit."""

    def __init__(self, max_seconds: float, until: UntilEvent | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.max_seconds, self.until, self.clock = max_seconds, until, clock
        self.wanted = until.events.compile() if until is not None else None
        self.held: list[bytes] = []
        self.started: float | None = None
        self.signalled: WatchEvent | None = None
        self.signals: WatchSignals | None = None
        self.waiter: Waiter | None = None

    def describe(self) -> str:
        until = f" or until an event of {self.until.resource} passes" if self.until is not None else ""
        return f"hold the watch's events up to {self.max_seconds:g}s{until}"

    def listen(self, signals: WatchSignals) -> None:
        self.signals = signals

    def edit(self, line: bytes, event: WatchEvent | None) -> list[bytes]:
        out = self._check()
        if self.started is None:
            self.started = self.clock()
            self.signalled = None
            if self.signals is not None and self.until is not None and self.wanted is not None:
                self.waiter = self.signals.wait((self.until.group, self.until.resource), self.wanted, self._release,
                                               self)
        self.held.append(line)
        return out

    def _release(self, event: WatchEvent) -> None:
        self.signalled, self.waiter = event, None
        if self.request_tick is not None:
            self.request_tick()

    def next_due(self) -> float | None:
        if self.started is None:
            return None
        return self.clock() if self.signalled is not None else self.started + self.max_seconds

    def tick(self) -> list[bytes]:
        return self._check()

    def at_end(self) -> list[bytes]:
        return self._flush("end")

    def release(self) -> list[bytes]:
        return self._flush("deactivated")

    def _check(self) -> list[bytes]:
        if self.started is None:
            return []
        if self.signalled is not None:
            return self._flush("event")
        if self.clock() - self.started >= self.max_seconds:
            return self._flush("time")
        return []

    def _flush(self, reason: str) -> list[bytes]:
        if self.started is None:
            return []
        if self.waiter is not None and self.signals is not None:
            self.signals.cancel(self.waiter)
        record: dict[str, object] = {"action": "held", "reason": reason, "events": len(self.held),
                                     "heldSeconds": round(self.clock() - self.started, 3)}
        if self.signalled is not None:
            record["releasedBy"] = self.signalled.as_dict()
        self.records.append(record)
        out, self.held, self.started, self.waiter, self.signalled = self.held, [], None, None, None
        return out


class HoldEvents(FaultSpec):
    """Skew between watches: this watch's events held until an event passes on another resource's watch,
    or maxSeconds, then delivered in order."""

    kind: ClassVar[str] = "holdEvents"
    traits: ClassVar[Traits] = Traits(acts_on="watch", edits_events=True, orders_events=True)
    search_group: ClassVar[str] = "view"
    searched_by_default: ClassVar[bool] = False
    maxSeconds: Annotated[float, Field(gt=0, le=600)] = Field(
        description="a hold ends at the latest this long after its first event")
    untilEvent: UntilEvent | None = Field(
        None, description="a hold ends earlier when such an event passes on a watch of that resource")

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        """Skew: this watch held until the other resource's watch passes an event (the waist's choice for this
        match), or a time."""
        until = where.hold_until.get(where.match_name) or next(iter(where.hold_until.values()))
        hold: dict[str, Any] = {"maxSeconds": float(rng.choice([1, 2, 5]))}
        if rng.random() < 0.8:
            hold["untilEvent"] = until
        return hold

    def applies_to(self, ident: RequestIdentity) -> bool:
        return ident.watch

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        return Plan(before=(EditEvents(HoldEditor(self.maxSeconds, self.untilEvent)),))
