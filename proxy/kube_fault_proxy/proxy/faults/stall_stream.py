"""stallStream: a live watch goes silent. No byte, no end, no error, for a bounded window; then it ends cleanly.

What users met after a control-plane upgrade (OpenSandbox#1533): an established watch stayed open and delivered
nothing, with no FIN and no error, and the operator waited on it for hours. Here the watch passes until its Nth
event (bookmarks count) or until a time after its answer began; then every byte the apiserver sends is withheld,
and the stream stays open for `for`, or until the client gives up (it resets the stream or closes the
connection). Then the proxy ends the stream cleanly, as the apiserver ends a watch at its timeoutSeconds, and a
client-go reflector resumes from the last revision it saw: the events withheld come again from the watch cache.
A stream that silently resumed would skip them (a gap no apiserver makes), so a stall always ends in an end.
The connection stays up meanwhile: its other streams and its HTTP/2 PINGs are answered, so client-go's
connection health check sees nothing wrong (that is `stallConnection`).
"""

from __future__ import annotations

import math
import random
from typing import Annotated, Any, ClassVar, Self

from pydantic import ConfigDict, Field, model_validator

from kube_fault_proxy.proxy.faults.base import INT64_MAX, Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import LimitWatch, Plan, StallAnswer, Step
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.schema.strict import NON_ZERO_DURATION, Duration, exactly_one_of

MAX_STALL_SECONDS = 3600.0  # a stall is bounded: an hour at most, like `hang` until the client gives up


class StallStream(FaultSpec):
    """A watch goes silent after `afterEvents` events or `after` its answer began, for `for` (or until the client
    gives up), then ends cleanly. Its connection and its other streams go on."""

    model_config = ConfigDict(json_schema_extra=exactly_one_of("afterEvents", "after"))
    kind: ClassVar[str] = "stallStream"
    # It acts on the stream it decided, not through an editor of its events (the silence's start is journaled as a
    # `watch-event` record, action `stalled`, all the same).
    traits: ClassVar[Traits] = Traits(acts_on="watch")
    search_group: ClassVar[str] = "watch"
    searched_by_default: ClassVar[bool] = False  # a search draws it only when named: earlier draws stay as they were
    afterEvents: Annotated[int, Field(ge=0, le=INT64_MAX)] | None = Field(
        None, description="the silence begins after this many events (bookmarks count; 0: before the first)")
    after: Duration | None = Field(
        None, description="the silence begins this long after the answer's headers (e.g. 5s; 0s: at once)")
    for_: Duration = Field(
        alias="for", description="how long the stream stays silent and open, at most 1h (the client may give up "
                                 "sooner); then it ends cleanly", json_schema_extra=NON_ZERO_DURATION)

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        stall: dict[str, Any] = ({"afterEvents": rng.choice([0, 1, 10])} if rng.random() < 0.6
                                 else {"after": rng.choice(["1s", "5s"])})
        stall["for"] = rng.choice(["10s", "30s", "60s"])
        return stall

    @model_validator(mode="after")
    def _bounded(self) -> Self:
        if (self.afterEvents is None) == (self.after is None):
            raise ValueError("stallStream needs exactly one of afterEvents, after")
        if not 0 < self.for_ <= MAX_STALL_SECONDS:
            raise ValueError(f"stallStream: for must be longer than 0s and at most {MAX_STALL_SECONDS:g}s")
        if self.after is not None and self.after > MAX_STALL_SECONDS:
            raise ValueError(f"stallStream: after must be at most {MAX_STALL_SECONDS:g}s")
        return self

    def applies_to(self, ident: RequestIdentity) -> bool:
        return ident.watch

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        steps: list[Step] = [StallAnswer(self.for_, self.afterEvents, self.after)]
        if self.after is not None:  # the apiserver ends its watch as the window closes: none runs on behind it
            steps.append(LimitWatch(max(1, math.ceil(self.after + self.for_))))
        return Plan(before=tuple(steps))
