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
PROTOBUF = "application/vnd.kubernetes.protobuf"


class WatchFrames:
    """Counts a watch's whole events in its bytes, however chunks cut them: JSON lines, or protobuf frames
    (a 4-byte big-endian length, then the event)."""

    def __init__(self, protobuf: bool) -> None:
        self.protobuf = protobuf
        self.count = 0
        self._header = bytearray()  # protobuf: the length read so far
        self._left = 0  # protobuf: the bytes of the current event still to come

    def until(self, chunk: bytes, total: int) -> int | None:
        """Read `chunk`; the offset just past the event that makes `total`, if it ends in this chunk (the
        count then stops there)."""
        if self.count >= total:
            return 0
        pos = 0
        while pos < len(chunk):
            if not self.protobuf:
                nl = chunk.find(b"\n", pos)
                if nl < 0:
                    return None
                pos = nl + 1
            elif self._left:
                step = min(self._left, len(chunk) - pos)
                self._left -= step
                pos += step
                if self._left:
                    return None
            else:
                need = 4 - len(self._header)
                self._header += chunk[pos:pos + need]
                pos += min(need, len(chunk) - pos)
                if len(self._header) < 4:
                    return None
                self._left = int.from_bytes(self._header, "big")
                self._header.clear()
                if self._left:
                    continue
            self.count += 1
            if self.count >= total:
                return pos
        return None


class StreamStall:
    """One watch's stall: what passes, what is withheld, and when the silence began (monotonic seconds)."""

    def __init__(self, step: StallAnswer, content_type: str, began: float) -> None:
        self.step = step
        self.frames = WatchFrames(content_type.split(";")[0].strip() == PROTOBUF)
        self.due = began + step.after_seconds if step.after_seconds is not None else None
        # Silent from the answer's first byte (after no event, or after no time): the silence begins with it.
        self.stalled_at: float | None = began if step.after_events == 0 or step.after_seconds == 0 else None
        self.withheld_bytes = 0
        self.ended = False  # the stall is over: the stream ended, or is being ended

    @property
    def ends_at(self) -> float | None:
        """When the window closes (None: not stalled yet)."""
        return None if self.stalled_at is None else self.stalled_at + self.step.seconds

    def start(self, now: float) -> bool:
        """The silence begins now (a timer at `due`); False if it already had."""
        if self.stalled_at is not None:
            return False
        self.stalled_at = now
        return True

    def feed(self, data: bytes, now: float) -> list[bytes]:
        """What of the apiserver's chunk reaches the client."""
        if self.ended:  # over: a stall that had begun withholds the rest until the end; one that had not, none
            return [] if self.stalled_at is not None else [data]
        if self.stalled_at is None and self.due is not None and now >= self.due:
            self.stalled_at = self.due
        if self.stalled_at is None and self.step.after_events is not None:
            cut = self.frames.until(data, self.step.after_events)
            if cut is None:
                return [data]
            self.stalled_at = now
            self.withheld_bytes += len(data) - cut
            return [data[:cut]] if cut else []
        if self.stalled_at is None:
            return [data]
        self.withheld_bytes += len(data)
        return []


class StallStream(FaultSpec):
    """A watch goes silent after `afterEvents` events or `after` its answer began, for `for` (or until the client
    gives up), then ends cleanly. Its connection and its other streams go on."""

    model_config = ConfigDict(json_schema_extra=exactly_one_of("afterEvents", "after"))
    kind: ClassVar[str] = "stallStream"
    # It acts when the silence begins (a `watch-event` record, action `stalled`), not when it decided the watch.
    traits: ClassVar[Traits] = Traits(acts_on="watch", edits_events=True)
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
