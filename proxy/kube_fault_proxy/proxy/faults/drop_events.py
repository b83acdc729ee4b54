"""dropEvents: chosen watch events never reach the client.

The BOOKMARK that ends a WatchList's initial events (`k8s.io/initial-events-end`) is dropped only when `events.types`
names BOOKMARK: a client-go informer waits for it before it hands its handlers a single event (until its watch
times out, minutes later), so dropping it is a server that breaks the WatchList protocol, not a lost event."""

from __future__ import annotations

import random
from typing import Annotated, Any, ClassVar

from pydantic import Field

from kube_fault_proxy.proxy.faults.base import Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import EditEvents, Plan
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.requests.watch import EventEditor, EventSelector, WatchEvent


class DropEditor(EventEditor):
    """Drops each selected event with a probability, from the stream's own seeded source."""

    def __init__(self, selector: EventSelector, probability: float, rng: random.Random) -> None:
        super().__init__()
        self.selected = selector.compile()
        self.spares_initial_end = "BOOKMARK" not in (selector.types or ())
        self.probability = probability
        self.rng = rng

    action = "dropped"

    def describe(self) -> str:
        return f"drop selected events (p={self.probability:g})"

    def act(self, line: bytes) -> list[bytes]:
        """What a chosen event becomes."""
        return []

    def edit(self, line: bytes, event: WatchEvent | None) -> list[bytes]:
        if event is None or not self.selected(event) or (event.initial_events_end and self.spares_initial_end):
            return [line]
        if self.probability < 1.0 and self.rng.random() >= self.probability:
            return [line]
        self.note(self.action, event)
        return self.act(line)


class DropEvents(FaultSpec):
    """Events of the watch that match `events` are dropped with `probability`."""

    kind: ClassVar[str] = "dropEvents"
    traits: ClassVar[Traits] = Traits(acts_on="watch", edits_events=True, rule_probability=False)
    search_group: ClassVar[str] = "watch"
    editor: ClassVar[type[DropEditor]] = DropEditor
    events: EventSelector = Field(EventSelector(), description=(
        "which events of the watch (unset: every event but the BOOKMARK that ends a WatchList's initial events, "
        "which only types naming BOOKMARK drop)"))
    probability: Annotated[float, Field(ge=0.0, le=1.0)] = Field(
        1.0, description="chance per selected event, drawn from the stream's own seeded source")

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        events: dict[str, Any] = {}
        if rng.random() < 0.7:
            events["types"] = sorted(rng.sample(["ADDED", "MODIFIED", "DELETED"], rng.randint(1, 2)))
        if rng.random() < 0.4:
            events["hasNodeName"] = rng.random() < 0.5
        spec: dict[str, Any] = {"probability": rng.choice([0.05, 0.2, 0.5, 1.0])}
        if events:
            spec["events"] = events
        return spec

    def applies_to(self, ident: RequestIdentity) -> bool:
        return ident.watch

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        stream_rng = random.Random(rng.getrandbits(64))
        return Plan(before=(EditEvents(self.editor(self.events, self.probability, stream_rng)),))
