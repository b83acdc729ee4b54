"""A run's history of workload objects: every change the apiserver reported, in the order etcd wrote it.

A Change is one watch event (ADDED, MODIFIED, DELETED) with the time it was seen; a History orders
them by resourceVersion (one etcd numbers every write, whatever the resource), so a pod's creation
and its ReplicaSet's scale-up are replayed in the order they happened, not the order two watches
delivered them. Pure and JSON-serialisable: a recorded history is test data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class Change:
    """One watch event: when it was seen (epoch seconds), the object's kind, the event type, the object."""

    t: float
    kind: str
    type: str
    obj: Obj

    @property
    def revision(self) -> int:
        """The object's resourceVersion as etcd's revision (0 when it has none)."""
        value = str(self.obj["metadata"].get("resourceVersion") or "0")
        return int(value) if value.isdigit() else 0


@dataclass
class History:
    """Every change seen between start and end (epoch seconds)."""

    changes: list[Change] = field(default_factory=list)
    start: float = 0.0
    end: float = 0.0

    def ordered(self) -> list[Change]:
        """The changes in etcd's order (by resourceVersion; ties, and objects without one, by time seen)."""
        return sorted(self.changes, key=lambda c: (c.revision, c.t))

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"start": self.start, "end": self.end,
                "changes": [{"t": c.t, "kind": c.kind, "type": c.type, "object": c.obj} for c in self.changes]}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> History:
        """From its JSON form."""
        return cls([Change(float(c["t"]), str(c["kind"]), str(c["type"]), c["object"]) for c in doc["changes"]],
                   float(doc["start"]), float(doc["end"]))

    def save(self, path: Path) -> None:
        """Write as JSON."""
        path.write_text(json.dumps(self.as_dict(), separators=(",", ":")))

    @classmethod
    def load(cls, path: Path) -> History:
        """Read a saved history."""
        return cls.from_dict(json.loads(path.read_text()))


def slim(obj: Obj) -> Obj:
    """The object without what no promise reads (managedFields), as a plain dict."""
    meta = {k: v for k, v in dict(obj.get("metadata") or {}).items() if k != "managedFields"}
    return {**dict(obj), "metadata": meta}
