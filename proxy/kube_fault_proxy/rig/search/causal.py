"""A target's causal points in one fault-free reference run, as in Sieve's test plans: each write the target made
and each event it consumed just before a write, read from the run's recorded history (a watch straight from the
apiserver, rig/invariants/history.py) and the proxy's journal.

The direct watch does not say who wrote a change, so a write is known by what it changed, per the target's waist
(waist.py): for a scheduler, a pod given its node (a Binding) or its PodScheduled=False condition (its status
write); for kube-controller-manager, a pod created or deleted by its controller, a workload's status changed, a
ReplicaSet created by a Deployment. The journal of a reference run must show no effect (the ledger reads it): a
run the proxy perturbed is no reference. An event consumed before a write is the last change before it (in etcd's
order) on the written object, else on its owner, else on any resource the target watches.

Pure: a history, journal records and the phase marks in; points out."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from kube_fault_proxy.rig.invariants import ledger
from kube_fault_proxy.rig.invariants.history import Change, History
from kube_fault_proxy.rig.search.waist import CONTROLLERS, WORKLOAD_RESOURCES, Selector, Waist

WRITE, EVENT = "write", "event"
LOAD_POD = re.compile(r"^(load)-[0-9a-f]+-(\d+)$")  # rig/workloads/load.py names pods load-<run id>-<index>
OWNED_POD = re.compile(r"^(.+)-[a-z0-9]{5}$")  # a controller's pod: its owner's name and a random suffix


class ReferenceError(ValueError):
    """A reference run that cannot give a plan: names what is wrong with it."""


@dataclass(frozen=True)
class Point:
    """One causal point: a write of the target's (`match` is its waist match, `count` its ordinal among the
    reference run's writes of that match) or an event it consumed before a write (`match` the watch it came on;
    `count` the ordinal of the write it came before, `before` how many writes of that match came before it)."""

    id: str
    kind: str  # write | event
    match: str
    resource: str
    verb: str  # a write's verb (create/binding, patch, ...); an event's type (ADDED, MODIFIED, DELETED)
    phase: str
    count: int
    object: str  # namespace/name in the reference run
    names: str  # a name glob that finds the same object in another trial (its run id or suffix as *)
    revision: int
    write: str  # the write's match this point is counted on (a write point's own)
    before: int = 0

    @property
    def group(self) -> str:
        """The equivalence class: same resource, verb and phase of the workload."""
        return f"{'watch ' if self.kind == EVENT else ''}{self.resource} {self.verb} {self.phase}"

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> Point:
        """From its JSON form."""
        return cls(**{k: doc[k] for k in cls.__dataclass_fields__})


def resource_of(kind: str) -> str:
    """The plural resource of a workload kind the recorder watches (Pod -> pods, ReplicaSet -> replicasets)."""
    return f"{kind.lower()}s"


def name_glob(name: str, owner: str = "") -> str:
    """A glob finding the same object in another trial: a load pod by its index, a controller's pod by its owner."""
    if m := LOAD_POD.match(name):
        return f"{m.group(1)}-*-{m.group(2)}"
    if owner and (m := OWNED_POD.match(name)) and m.group(1).startswith(owner):
        return f"{m.group(1)}-*"
    return name


def _key(c: Change) -> tuple[str, str, str]:
    meta = c.obj.get("metadata") or {}
    return c.kind, str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _owner(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    for o in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if o.get("controller"):
            return str(o.get("kind") or ""), str(o.get("name") or "")
    return None


def _scheduled_false(obj: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
               for c in (obj.get("status") or {}).get("conditions") or [])


def _scheduler_write(c: Change, before: Mapping[str, Any] | None) -> str | None:
    """A scheduler's write that made this change: its Binding, or its status write (PodScheduled=False)."""
    if c.kind != "Pod" or c.type != "MODIFIED" or before is None:
        return None
    if (c.obj.get("spec") or {}).get("nodeName") and not (before.get("spec") or {}).get("nodeName"):
        return "binding"
    if _scheduled_false(c.obj) and not _scheduled_false(before):
        return "pod-write"
    return None


def _controller_write(c: Change, before: Mapping[str, Any] | None) -> str | None:
    """A workload controller's write that made this change: a pod created or deleted, a status, a ReplicaSet."""
    owned = _owner(c.obj) is not None
    if c.kind == "Pod":
        if c.type == "ADDED" and owned and before is None:
            return "pod-create"
        gone = (c.obj.get("metadata") or {}).get("deletionTimestamp")
        if owned and before is not None and gone and not (before.get("metadata") or {}).get("deletionTimestamp"):
            return "pod-delete"
        return None
    if c.kind == "ReplicaSet" and c.type == "ADDED" and owned and before is None:
        return "replicaset-write"
    if (resource_of(c.kind) in WORKLOAD_RESOURCES and c.type == "MODIFIED" and before is not None
            and c.obj.get("status") != before.get("status")):  # a workload's, not a node's heartbeat
        return "status-write"
    return None


def watched(waist: Waist) -> frozenset[str]:
    """The resources the target watches (its waist's watch matches)."""
    return frozenset(r for _, sel, _, is_watch in waist.matches if is_watch for r in sel.get("resources", []))


def selector(waist: Waist, match: str) -> Selector:
    """A waist match's selector, by name (KeyError for one the waist has not)."""
    return next({k: list(v) for k, v in m[1].items()} for m in waist.matches if m[0] == match)


def watch_match(waist: Waist, resource: str) -> str | None:
    """The waist's watch match that covers a resource (None: the target does not watch it)."""
    return next((m[0] for m in waist.matches if m[3] and resource in m[1].get("resources", [])), None)


def phase_of(t: float, phases: Sequence[tuple[str, float]]) -> str:
    """The workload phase a moment falls in: the last phase started by then (the first before any)."""
    name = phases[0][0] if phases else "load"
    for n, start in phases:
        if t >= start:
            name = n
    return name


def _check_clean(records: Iterable[Mapping[str, Any]]) -> None:
    effects = ledger.read(records, "the reference run's journal").effects
    if effects:
        raise ReferenceError(f"the reference run's journal shows {len(effects)} fault effect(s) (the first: "
                             f"{effects[0].show()}): a reference run is fault-free")


def points(history: History, records: Iterable[Mapping[str, Any]], waist: Waist,
           phases: Sequence[tuple[str, float]] = (), until: float | None = None) -> list[Point]:
    """The causal points of a reference run, in etcd's order: the target's writes (only those before `until`, when
    its faults would be switched off) and, per write, the event it consumed just before it (each event once)."""
    _check_clean(records)
    classify = _controller_write if waist is CONTROLLERS else _scheduler_write
    watch = watched(waist)
    last: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    seen: list[Change] = []  # every change before the one at hand, in etcd's order
    counts: dict[str, int] = {}
    out: list[Point] = []
    consumed: set[int] = set()
    for c in history.ordered():
        key = _key(c)
        before = last.get(key)
        match = None if until is not None and c.t >= until else classify(c, before)
        if match is not None:
            counts[match] = counts.get(match, 0) + 1
            owner = _owner(c.obj)
            out.append(_write_point(c, match, counts[match], waist, phases, owner))
            event = _consumed(seen, key, owner, watch)
            if event is not None and id(event) not in consumed:
                consumed.add(id(event))
                out.append(_event_point(event, out[-1], sum(1 for p in out if p.kind == EVENT) + 1,
                                        _writes_before(out, match, event.revision), waist, phases))
        seen.append(c)
        last[key] = c.obj if c.type != "DELETED" else {}
    return out


def _writes_before(out: Sequence[Point], match: str, revision: int) -> int:
    return sum(1 for p in out if p.kind == WRITE and p.match == match and p.revision < revision)


def _consumed(seen: Sequence[Change], key: tuple[str, str, str], owner: tuple[str, str] | None,
              watch: frozenset[str]) -> Change | None:
    """The event a write consumed: the last change on its object, else on its owner, else on anything watched."""
    mine = [c for c in seen if resource_of(c.kind) in watch]
    for wanted in (key, (owner[0], key[1], owner[1]) if owner else None):
        if wanted is not None and (hits := [c for c in mine if _key(c) == wanted]):
            return hits[-1]
    return mine[-1] if mine else None


def _write_point(c: Change, match: str, count: int, waist: Waist, phases: Sequence[tuple[str, float]],
                 owner: tuple[str, str] | None) -> Point:
    sel = selector(waist, match)
    verbs, subs = sel.get("verbs", ["write"]), sel.get("subresources")
    verb = f"{verbs[0] if len(verbs) == 1 else '/'.join(verbs)}{'/' + subs[0] if subs else ''}"
    _, ns, name = _key(c)
    own, resources = resource_of(c.kind), sel.get("resources", [resource_of(c.kind)])
    return Point(f"w{count}-{match}", WRITE, match, own if own in resources else resources[0], verb,
                 phase_of(c.t, phases), count, f"{ns}/{name}", name_glob(name, owner[1] if owner else ""),
                 c.revision, match)


def _event_point(c: Change, write: Point, number: int, before: int, waist: Waist,
                 phases: Sequence[tuple[str, float]]) -> Point:
    kind, ns, name = _key(c)
    resource = resource_of(kind)
    owner = _owner(c.obj)
    return Point(f"e{number}-{resource}", EVENT, watch_match(waist, resource) or "", resource, c.type,
                 phase_of(c.t, phases), write.count, f"{ns}/{name}", name_glob(name, owner[1] if owner else ""),
                 c.revision, write.match, before)
