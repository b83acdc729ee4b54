"""coalesceEvents: a watch's events held for a window, then only each object's latest state delivered.

What a client sees when it is slow to read or an apiserver batches: intermediate states it never
observes (Sieve's unobserved states). An object added and deleted inside the window is never seen; a
pod that went Pending -> bound -> Running is seen once, Running. The event type says what the client
needs: ADDED for an object it had not seen before the window (its first held event was ADDED), else
MODIFIED; DELETED only for one it had seen. Delivered in resourceVersion order; of the window's
BOOKMARKs only the newest (and a `k8s.io/initial-events-end` one, which ends a WatchList's initial
events and is never dropped) is delivered, after the events whose resourceVersions precede it: a
bookmark only moves the client's resume point, so an older one in the same delivery says nothing more.

mitmproxy sends a streamed answer's bytes only when the apiserver sends some, so a window also ends at
the next event after it, and the watch's own `timeoutSeconds` is lowered to the window (rounded up):
a quiet watch's last window is delivered when the apiserver ends it, and the client re-watches from
the last resourceVersion it got.
"""

from __future__ import annotations

import bisect
import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

from pydantic import Field

from kube_fault_proxy.proxy.faults.base import Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import EditEvents, LimitWatch, Plan
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.requests.watch import EventEditor, WatchEvent
from kube_fault_proxy.proxy.schema.globs import glob_matcher
from kube_fault_proxy.proxy.schema.strict import StrictModel

Glob = Annotated[str, Field(max_length=253)]


class ObjectSelector(StrictModel):
    """Which objects' events are coalesced (unset: every object); the others are held and delivered
    as they came, so resourceVersions stay in order."""

    names: Annotated[list[Glob], Field(min_length=1)] | None = Field(None, description="object name globs")
    namespaces: Annotated[list[Glob], Field(min_length=1)] | None = Field(None, description="namespace globs")

    def compile(self) -> Callable[[WatchEvent], bool]:
        """A predicate over events."""
        names = glob_matcher(self.names) if self.names else None
        namespaces = glob_matcher(self.namespaces) if self.namespaces else None
        return lambda e: (names is None or names(e.name)) and (namespaces is None or namespaces(e.namespace))


@dataclass(slots=True)
class _Held:
    first_type: str
    line: bytes
    type: str
    rv: str
    seq: int
    events: int = 1


@dataclass(slots=True)
class _Window:
    started: float
    objects: dict[tuple[str, str, str], _Held] = field(default_factory=dict)
    others: list[tuple[str, int, bytes]] = field(default_factory=list)  # (rv, seq, line) delivered as they came
    bookmark: tuple[str, int, bytes] | None = None
    initial_end: list[tuple[str, int, bytes]] = field(default_factory=list)
    events: int = 0
    bookmarks_dropped: int = 0

    @property
    def size(self) -> int:
        return len(self.objects) + len(self.others)


def retyped(line: bytes, old: str, new: str) -> bytes:
    """The event line with another type: its first bytes changed, or (another layout) re-encoded."""
    if old == new:
        return line
    prefix = b'{"type":"' + old.encode() + b'"'
    if line.startswith(prefix):
        return b'{"type":"' + new.encode() + b'"' + line[len(prefix):]
    doc = json.loads(line)
    doc["type"] = new
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


class CoalesceEditor(EventEditor):
    """One watch's windows: events held per object, delivered as each object's latest state."""

    def __init__(self, window_seconds: float, max_held: int, objects: ObjectSelector,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window_seconds = window_seconds
        self.max_held = max_held
        self.selected = objects.compile()
        self.clock = clock
        self.window: _Window | None = None
        self.seq = 0

    def describe(self) -> str:
        return f"coalesce events for {self.window_seconds:g}s windows (at most {self.max_held} objects held)"

    def edit(self, line: bytes, event: WatchEvent | None) -> list[bytes]:
        now = self.clock()
        out: list[bytes] = []
        w = self.window
        if w is not None and now - w.started >= self.window_seconds:
            out += self.flush("window", now)
        if event is None or event.type == "ERROR":  # an ERROR ends the watch: what was held goes first
            out += self.flush("error" if event is not None else "unreadable", now)
            return [*out, line]
        w = self.window
        if w is None:
            w = self.window = _Window(now)
        self.seq += 1
        rv = event.resource_version
        if event.type == "BOOKMARK":
            w.events += 1
            if event.initial_events_end:
                w.initial_end.append((rv, self.seq, line))
            else:
                w.bookmarks_dropped += w.bookmark is not None
                w.bookmark = (rv, self.seq, line)
            return out
        key = (event.namespace, event.name, event.uid)
        held = w.objects.get(key) if self.selected(event) else None
        if held is None and w.size >= self.max_held:
            out += self.flush("full", now)
            w = self.window = _Window(now)
        w.events += 1
        if not self.selected(event):
            w.others.append((rv, self.seq, line))
        elif held is None:
            w.objects[key] = _Held(event.type, line, event.type, rv, self.seq)
        else:
            held.line, held.type, held.rv, held.seq = line, event.type, rv, self.seq
            held.events += 1
        return out

    def at_end(self) -> list[bytes]:
        return self.flush("end", self.clock())

    def release(self) -> list[bytes]:
        return self.flush("deactivated", self.clock())

    def flush(self, reason: str, now: float) -> list[bytes]:
        """Deliver the window: each object's latest state, in resourceVersion order, bookmarks in place."""
        w, self.window = self.window, None
        if w is None:
            return []
        items: list[tuple[str, int, bytes]] = list(w.others)
        elided = 0
        for h in w.objects.values():
            seen_before = h.first_type != "ADDED"
            if h.type == "DELETED" and not seen_before:
                elided += h.events  # added and deleted inside the window: never seen
                continue
            elided += h.events - 1
            kind = "DELETED" if h.type == "DELETED" else "MODIFIED" if seen_before else "ADDED"
            items.append((h.rv, h.seq, retyped(h.line, h.type, kind)))
        events = len(items)
        marks = [*w.initial_end, *([w.bookmark] if w.bookmark is not None else [])]
        numeric = all(rv.isdigit() for rv, _, _ in items + marks)
        order: Callable[[tuple[str, int, bytes]], tuple[int, int]] = (
            (lambda t: (int(t[0]), t[1])) if numeric else (lambda t: (t[1], 0)))
        items.sort(key=order)
        keys = [order(t) for t in items]
        for mark in sorted(marks, key=order):
            i = bisect.bisect_right(keys, (order(mark)[0], math.inf)) if numeric else \
                bisect.bisect_right(keys, order(mark))
            items.insert(i, mark)
            keys.insert(i, order(mark))
        self.records.append({"action": "coalesced", "reason": reason, "held": w.events, "delivered": events,
                             "elided": elided, "bookmarks": len(marks), "bookmarksDropped": w.bookmarks_dropped,
                             "objects": len(w.objects), "heldSeconds": round(now - w.started, 3)})
        return [line for _, _, line in items]


class CoalesceEvents(FaultSpec):
    """Each `windowSeconds`, the watch's events held so far are delivered as each object's latest state."""

    kind: ClassVar[str] = "coalesceEvents"
    traits: ClassVar[Traits] = Traits(acts_on="watch", edits_events=True)
    search_group: ClassVar[str] = "view"
    searched_by_default: ClassVar[bool] = False
    windowSeconds: Annotated[float, Field(gt=0, le=600)] = Field(
        description="how long events are held; the watch's timeoutSeconds is lowered to it (rounded up)")
    maxHeldObjects: Annotated[int, Field(ge=1, le=10_000)] = Field(
        1000, description="objects (and events of unselected objects) held at most; one more delivers the "
                          "window early (journaled with reason full)")
    objects: ObjectSelector = Field(ObjectSelector(), description="whose events are coalesced (unset: every object)")

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        """A watch lasts a window: short ones, so a trial sees several."""
        return {"windowSeconds": float(rng.choice([0.5, 1, 2, 5]))}

    def applies_to(self, ident: RequestIdentity) -> bool:
        return ident.watch

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        editor = CoalesceEditor(self.windowSeconds, self.maxHeldObjects, self.objects)
        return Plan(before=(LimitWatch(max(1, math.ceil(self.windowSeconds))), EditEvents(editor)))
