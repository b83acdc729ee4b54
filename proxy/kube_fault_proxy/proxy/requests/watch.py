"""Watch streams as events: reassembly on newline boundaries, event identity, event selectors."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from kube_fault_proxy.proxy.schema.globs import glob_matcher
from kube_fault_proxy.proxy.schema.strict import StrictModel

EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"]
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """What a watch event line says, as far as faults care."""

    type: str
    kind: str
    namespace: str
    name: str
    resource_version: str
    has_node_name: bool
    uid: str = ""
    initial_events_end: bool = False  # the BOOKMARK that ends a watch's initial events (sendInitialEvents)

    def as_dict(self) -> dict[str, object]:
        """JSON form for the journal."""
        return {"type": self.type, "kind": self.kind, "namespace": self.namespace, "name": self.name,
                "resourceVersion": self.resource_version}


def parse_event(line: bytes) -> WatchEvent | None:
    """One newline-delimited JSON watch event, or None if the line is not one."""
    try:
        doc = json.loads(line)
        obj = doc["object"]
        meta = obj.get("metadata") or {}
        return WatchEvent(
            type=str(doc["type"]),
            kind=str(obj.get("kind", "")),
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            resource_version=str(meta.get("resourceVersion", "")),
            has_node_name=bool((obj.get("spec") or {}).get("nodeName")),
            uid=str(meta.get("uid", "")),
            initial_events_end=(meta.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true",
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


class EventSelector(StrictModel):
    """Which events of a watch a fault acts on; unset fields match anything."""

    types: Annotated[list[EventType], Field(min_length=1)] | None = Field(None, description="event types, any-of")
    names: Annotated[list[str], Field(min_length=1)] | None = Field(None, description="object name globs")
    namespaces: Annotated[list[str], Field(min_length=1)] | None = Field(None, description="namespace globs")
    hasNodeName: bool | None = Field(None, description="pods: true = spec.nodeName set, false = unset")

    def compile(self) -> Callable[[WatchEvent], bool]:
        """A predicate over events."""
        types = frozenset(self.types) if self.types else None
        names = glob_matcher(self.names) if self.names else None
        namespaces = glob_matcher(self.namespaces) if self.namespaces else None
        node = self.hasNodeName

        def check(e: WatchEvent) -> bool:
            return ((types is None or e.type in types) and (names is None or names(e.name))
                    and (namespaces is None or namespaces(e.namespace))
                    and (node is None or e.has_node_name == node))

        return check


Edit = Callable[[bytes, WatchEvent | None], list[bytes]]
# What a streamed watch's callable is called with when the proxy wakes it between the apiserver's chunks
# (mitm/patches/stream_ticks.py): compared by identity, never a chunk the apiserver sent.
TICK = bytes(bytearray(b"kfp-tick"))


class EventEditor:
    """One watch stream's edits: what to emit per event and at the end, and what it did."""

    def __init__(self) -> None:
        self.records: list[dict[str, object]] = []
        self.cut_connection = False
        self.request_tick: Callable[[], None] | None = None  # set by the stream: have `tick` called soon

    def listen(self, signals: Any) -> None:
        """Given the proxy's watch signals (proxy.watch_signals), for an editor that waits on other watches."""

    def describe(self) -> str:
        """A short reading for the journal."""
        raise NotImplementedError

    def edit(self, line: bytes, event: WatchEvent | None) -> list[bytes]:
        """The lines to send for this one (whole) line."""
        return [line]

    def at_end(self) -> list[bytes]:
        """Lines to append when the apiserver ends the stream."""
        return []

    def next_due(self) -> float | None:
        """When (monotonic seconds) the editor wants `tick` called, whether or not the apiserver sends."""
        return None

    def release(self) -> list[bytes]:
        """The activation that opened this watch is over: the lines the editor still keeps back, to send now (it
        edits nothing after this). Not `at_end`: a watch whose fault is over is not cut."""
        return []

    def tick(self) -> list[bytes]:
        """Lines to send now, between the apiserver's chunks (what came due)."""
        return []

    def note(self, action: str, event: WatchEvent | None) -> None:
        """Remember an edit for the journal."""
        self.records.append({"action": action, **(event.as_dict() if event else {})})


class EventStream:
    """Feeds arbitrary chunks, emits whole lines edited one event at a time.

    Chunk boundaries are not event boundaries: one chunk may hold several events, or part of one.
    A final line without a newline is passed through unchanged when the stream ends.
    """

    def __init__(self, edit: Edit) -> None:
        self._edit = edit
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        """Complete events in this chunk (plus what was buffered), edited."""
        self._buffer += chunk
        out: list[bytes] = []
        while (end := self._buffer.find(b"\n")) >= 0:
            line = bytes(self._buffer[: end + 1])
            del self._buffer[: end + 1]
            out += self._edit(line, parse_event(line))
        return out

    def end(self) -> list[bytes]:
        """What is left at the end of the stream."""
        rest, self._buffer = bytes(self._buffer), bytearray()
        return [rest] if rest else []
