"""watchList: a server that breaks the WatchList protocol.

A watch with `sendInitialEvents=true` (client-go's WatchList, on by default since client-go 1.35) streams the
current state as ADDED events, then a BOOKMARK whose object carries the annotation `k8s.io/initial-events-end:
"true"`. A client-go reflector builds its cache from the initial events and hands it over only at that bookmark;
until then its informer has not synced. Servers that got this wrong left informers hanging (antrea#8123,
cozystack#2786, kcp#3875). One `mode` per way of getting it wrong:

- `withhold`: the annotated bookmark never reaches the client; the events after it pass.
- `unannotated`: it is sent without its annotation (a plain BOOKMARK that only moves the resume point).
- `delay`: it, and every event after it, reaches the client `seconds` later, in order.
- `truncate`: the initial events end after `afterEvents` of them, before the bookmark: the client's connection is
  cut (`error: none`), or an ERROR event ends the stream (`expired`: 410, `internal`: 500), and nothing more
  of that watch reaches the client. A watch with fewer initial events is ended at its bookmark, which is dropped.

Only WatchList requests are taken (a resumed watch, or a watch without `sendInitialEvents`, is left alone). Each edit
is journaled as a `watch-event` with the number of initial events the client got (`initialEvents`).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import Field, model_validator

from kube_fault_proxy.proxy.faults.base import INT64_MAX, Draw, FaultSpec
from kube_fault_proxy.proxy.faults.cut import ERRORS
from kube_fault_proxy.proxy.faults.plan import EditEvents, Plan
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.requests.status import watch_error_event
from kube_fault_proxy.proxy.requests.watch import INITIAL_EVENTS_END, EventEditor, WatchEvent

Mode = Literal["withhold", "unannotated", "delay", "truncate"]
MODES: tuple[Mode, ...] = ("withhold", "unannotated", "delay", "truncate")


def unannotated(line: bytes) -> bytes:
    """The bookmark line without the `k8s.io/initial-events-end` annotation (and without an annotations map left
    empty); its other bytes re-encoded as JSON, one line."""
    doc = json.loads(line)
    meta = doc["object"]["metadata"]
    annotations = meta["annotations"]
    del annotations[INITIAL_EVENTS_END]
    if not annotations:
        del meta["annotations"]
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


class WatchListEditor(EventEditor):
    """One WatchList's stream: the initial events counted, the annotated bookmark edited by the mode."""

    def __init__(self, mode: Mode, seconds: float | None = None, after_events: int | None = None,
                 error: str = "none", clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.mode, self.seconds, self.after_events, self.error, self.clock = mode, seconds, after_events, error, clock
        self.error_line = watch_error_event(*ERRORS[error]) if error != "none" else None
        self.initial = 0  # initial events passed to the client so far
        self.initial_over = False  # the bookmark came (and was edited), or the initial events were cut short
        self.ended = False  # truncate: nothing more of this watch reaches the client
        self.held: list[bytes] = []  # delay: the bookmark and what came after it
        self.held_since: float | None = None

    def describe(self) -> str:
        match self.mode:
            case "withhold":
                return "withhold the WatchList's initial-events-end bookmark"
            case "unannotated":
                return f"send the WatchList's initial-events-end bookmark without its {INITIAL_EVENTS_END} annotation"
            case "delay":
                return f"delay the WatchList's initial-events-end bookmark {self.seconds:g}s"
        end = f"an ERROR event ({self.error})" if self.error_line else "a connection cut"
        return f"cut the WatchList's initial events short after {self.after_events} with {end}"

    def edit(self, line: bytes, event: WatchEvent | None) -> list[bytes]:
        if self.ended:
            return []
        if self.held:
            self.held.append(line)  # behind the delayed bookmark, in order
            return []
        if self.initial_over or event is None or event.type == "ERROR":
            return [line]
        if event.initial_events_end:
            return self._bookmark(line, event)
        if event.type == "BOOKMARK":
            return [line]
        self.initial += 1
        if self.mode == "truncate" and self.after_events is not None and self.initial >= self.after_events:
            return [line, *self._end(event)]
        return [line]

    def _record(self, action: str, event: WatchEvent | None, **more: object) -> None:
        self.records.append({"action": action, **(event.as_dict() if event else {}), "initialEvents": self.initial,
                             **more})

    def _bookmark(self, line: bytes, event: WatchEvent) -> list[bytes]:
        self.initial_over = True
        match self.mode:
            case "withhold":
                self._record("initial-events-end-withheld", event)
                return []
            case "unannotated":
                self._record("initial-events-end-unannotated", event)
                return [unannotated(line)]
            case "delay":
                self.held, self.held_since = [line], self.clock()
                return []
        return self._end(event)

    def _end(self, event: WatchEvent) -> list[bytes]:
        """Truncate: the initial events end here, with an ERROR event or a cut connection."""
        self.initial_over = self.ended = True
        self._record("cut", event, error=self.error)
        if self.error_line is not None:
            return [self.error_line]
        self.cut_connection = True
        return []

    def next_due(self) -> float | None:
        if self.held_since is None or self.seconds is None:
            return None
        return self.held_since + self.seconds

    def tick(self) -> list[bytes]:
        due = self.next_due()
        return self._flush("due") if due is not None and self.clock() >= due else []

    def at_end(self) -> list[bytes]:
        return self._flush("end")

    def release(self) -> list[bytes]:
        return self._flush("deactivated")

    def _flush(self, reason: str) -> list[bytes]:
        """Delay: the bookmark and what came after it, now."""
        if self.held_since is None:
            return []
        out, held_since = self.held, self.held_since
        self.held, self.held_since = [], None
        self.records.append({"action": "delayed", "reason": reason, "events": len(out), "initialEvents": self.initial,
                             "heldSeconds": round(self.clock() - held_since, 3)})
        return out


class WatchList(FaultSpec):
    """A WatchList (a watch with sendInitialEvents=true) whose initial-events-end bookmark is withheld, sent without
    its annotation or delayed, or whose initial events are cut short before it."""

    kind: ClassVar[str] = "watchList"
    traits: ClassVar[Traits] = Traits(acts_on="watch", watch_requests="relist", edits_events=True)
    search_group: ClassVar[str] = "watch"
    # Drawn only when named (--kinds), so a seeded search draws the very trials it drew before it came.
    searched_by_default: ClassVar[bool] = False
    mode: Mode = Field(description=(
        "withhold: the bookmark never comes; unannotated: it comes without its k8s.io/initial-events-end annotation; "
        "delay: it and all after it come `seconds` late; truncate: the initial events end after `afterEvents`"))
    seconds: Annotated[float, Field(gt=0, le=3600)] | None = Field(
        None, description="delay only (and required there): how late the bookmark comes")
    afterEvents: Annotated[int, Field(ge=1, le=INT64_MAX)] | None = Field(
        None, description="truncate only (and required there): initial events the client gets before the end")
    error: Literal["none", "expired", "internal"] | None = Field(
        None, description="truncate only: how the stream ends; none (the default) cuts the client's connection, "
                          "expired and internal send an ERROR event (410 Expired, 500 InternalError)")

    @model_validator(mode="after")
    def _fields_of_the_mode(self) -> Self:
        wanted = {"delay": {"seconds"}, "truncate": {"afterEvents"}}.get(self.mode, set())
        allowed = wanted | ({"error"} if self.mode == "truncate" else set())
        given = {f for f in ("seconds", "afterEvents", "error") if getattr(self, f) is not None}
        if missing := sorted(wanted - given):
            raise ValueError(f"watchList mode {self.mode} needs {', '.join(missing)}")
        if extra := sorted(given - allowed):
            raise ValueError(f"watchList mode {self.mode} takes no {', '.join(extra)}")
        return self

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        mode = rng.choice(MODES)
        if mode == "delay":
            return {"mode": mode, "seconds": float(rng.choice([2, 5, 10, 30]))}
        if mode == "truncate":
            return {"mode": mode, "afterEvents": rng.choice([1, 5, 20]),
                    "error": rng.choice(["none", "expired", "internal"])}
        return {"mode": mode}

    def applies_to(self, ident: RequestIdentity) -> bool:
        return ident.watch and ident.initial_events

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        return Plan(before=(EditEvents(WatchListEditor(self.mode, self.seconds, self.afterEvents,
                                                       self.error or "none")),))
