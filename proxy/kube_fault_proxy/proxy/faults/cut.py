"""cut: end a live watch after N events or T seconds, with or without a final ERROR event."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from kube_fault_proxy.proxy.faults.base import INT64_MAX, Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import EditEvents, LimitWatch, Plan, Step
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.requests.status import watch_error_event
from kube_fault_proxy.proxy.requests.watch import EventEditor, WatchEvent
from kube_fault_proxy.proxy.schema.strict import exactly_one_of

ERRORS = {
    "expired": (410, "Expired", "too old resource version: injected by kube-fault-proxy"),
    "internal": (500, "InternalError", "Internal error occurred: injected by kube-fault-proxy"),
}


class CutEditor(EventEditor):
    """Counts events; at the Nth sends the ERROR event (then drops the rest) or cuts the connection."""

    def __init__(self, after_events: int | None, error: str) -> None:
        super().__init__()
        self.after_events = after_events
        self.error = error
        self.error_line = watch_error_event(*ERRORS[error]) if error != "none" else None
        self.seen = 0
        self.done = False

    def describe(self) -> str:
        end = f"an ERROR event ({self.error})" if self.error_line else "a connection cut"
        when = f"after {self.after_events} events" if self.after_events else "when the apiserver ends it"
        return f"end the watch {when} with {end}"

    def edit(self, line: bytes, event: WatchEvent | None) -> list[bytes]:
        if self.done:
            return []
        if event is None or event.type == "BOOKMARK" or self.after_events is None:
            return [line]
        self.seen += 1
        if self.seen < self.after_events:
            return [line]
        self.done = True
        self.note("cut", event)
        if self.error_line is not None:
            return [line, self.error_line]
        self.cut_connection = True
        return [line]

    def at_end(self) -> list[bytes]:
        if self.done or self.error_line is None:
            return []
        self.done = True
        self.note("cut-at-end", None)
        return [self.error_line]


class Cut(FaultSpec):
    """afterSeconds: the apiserver ends the watch itself (timeoutSeconds); afterEvents: at that
    event boundary. Without an error, afterEvents cuts the client's connection (every stream on
    it): mitmproxy cannot end one HTTP/2 stream mid-flight."""

    model_config = ConfigDict(json_schema_extra=exactly_one_of("afterEvents", "afterSeconds"))
    kind: ClassVar[str] = "cut"
    # it acts once it decided the watch (afterSeconds lowers its timeout then), edited events or not
    traits: ClassVar[Traits] = Traits(acts_on="watch")
    search_group: ClassVar[str] = "watch"
    afterEvents: Annotated[int, Field(ge=1, le=INT64_MAX)] | None = Field(
        None, description="end the watch at this event boundary (with error: the ERROR event, else the connection)")
    afterSeconds: Annotated[int, Field(ge=1, le=86400)] | None = Field(
        None, description="lower the watch's timeoutSeconds to this, so the apiserver ends the stream cleanly")
    error: Literal["none", "expired", "internal"] = Field(
        "none", description="the ERROR event sent as the watch ends: none, a 410 Expired or a 500 InternalError")

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        cut: dict[str, Any] = ({"afterEvents": rng.choice([1, 10, 100])} if rng.random() < 0.6
                               else {"afterSeconds": rng.choice([1, 5])})
        cut["error"] = rng.choice(["none", "expired", "internal"])
        return cut

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.afterEvents is None) == (self.afterSeconds is None):
            raise ValueError("cut needs exactly one of afterEvents, afterSeconds")
        return self

    @classmethod
    def relists(cls, settings: Mapping[str, Any]) -> bool:
        """Ended with the 410 Expired error: the client relists."""
        return settings.get("error") == "expired"

    def applies_to(self, ident: RequestIdentity) -> bool:
        return ident.watch

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        steps: list[Step] = []
        if self.afterSeconds is not None:
            steps.append(LimitWatch(self.afterSeconds))
        if self.afterEvents is not None or self.error != "none":
            steps.append(EditEvents(CutEditor(self.afterEvents, self.error)))
        return Plan(before=tuple(steps))
