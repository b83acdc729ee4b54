"""duplicateEvents: chosen watch events reach the client twice."""

from __future__ import annotations

import random
from typing import Annotated, ClassVar

from pydantic import Field

from proxy.faults.base import FaultSpec
from proxy.faults.drop_events import DropEditor
from proxy.faults.plan import EditEvents, Plan
from proxy.identity import RequestIdentity
from proxy.watch import EventSelector, WatchEvent


class DuplicateEditor(DropEditor):
    """Sends each selected event twice, with a probability."""

    def describe(self) -> str:
        return f"duplicate selected events (p={self.probability:g})"

    def edit(self, line: bytes, event: WatchEvent | None) -> list[bytes]:
        if event is None or not self.selected(event):
            return [line]
        if self.probability < 1.0 and self.rng.random() >= self.probability:
            return [line]
        self.note("duplicated", event)
        return [line, line]


class DuplicateEvents(FaultSpec):
    """Events of the watch that match `events` are sent twice with `probability`."""

    kind: ClassVar[str] = "duplicateEvents"
    events: EventSelector = EventSelector()
    probability: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0

    def applies_to(self, ident: RequestIdentity) -> bool:
        return ident.watch

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        stream_rng = random.Random(rng.getrandbits(64))
        return Plan(before=(EditEvents(DuplicateEditor(self.events, self.probability, stream_rng)),))
