"""The differential oracle: a workload's quiescent end state with no fault, learned from clean runs, and how a
faulted trial's end state differs from it beyond what differs between clean runs.

An invariant names one thing that must never happen. A fault can also leave a cluster in a state no invariant
names: a pod Failed that never fails, a Job left without its Complete condition, a queue that books one pod
more. So each trial's end state is reduced to facts (a name and a value: counts of pods by phase, by condition,
per workload its status counts and conditions, per node its pods, YuniKorn's allocations), the same workload is
run K times with no fault (K >= 3), and a fact whose value differs between those clean runs is masked. A
faulted trial whose facts differ from the clean runs' on a fact that never varied has `diverged`. The facts
are counts and names the workload fixes, never uids or times, so clean runs of a deterministic workload agree.

The nondeterminism form (as in Kamera): one profile replayed with different event orders (other seeds of the
kinds that delay or hold watch events) that ends in more than one distinct state, once masked, is also a
finding.

Pure: states in, a baseline and divergences out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
Fact = str | int | bool
Facts = dict[str, Fact]
ABSENT = "(absent)"  # how a divergence shows a fact one side does not have
DIVERGED = "diverged"  # what a trial breaks that ends where no clean run of its workload did, no invariant broken
MIN_CLEAN_RUNS = 3  # a mask learned from fewer runs than this masks too little to trust


def _count(out: Facts, key: str, n: int = 1) -> None:
    out[key] = int(out.get(key, 0)) + n


def _mine(pods: Iterable[Obj], namespace: str | None) -> list[Obj]:
    return [p for p in pods if namespace is None or p["metadata"].get("namespace") == namespace]


def pod_facts(pods: Iterable[Obj], namespace: str | None = None) -> Facts:
    """What the pods of a namespace are at the end: how many, bound, pending, by phase, by condition (type, status
    and reason), and how many run on each node."""
    out: Facts = {"pods": 0, "pods/bound": 0, "pods/pending": 0}
    for p in _mine(pods, namespace):
        _count(out, "pods")
        status, node = p.get("status") or {}, (p.get("spec") or {}).get("nodeName")
        phase = status.get("phase") or "Unknown"
        _count(out, f"pods/phase/{phase}")
        if node:
            _count(out, "pods/bound")
            _count(out, f"node/{node}/pods")
        elif phase not in ("Succeeded", "Failed"):
            _count(out, "pods/pending")
        if (p.get("metadata") or {}).get("deletionTimestamp"):
            _count(out, "pods/terminating")
        for c in status.get("conditions") or []:
            reason = f"/{c['reason']}" if c.get("reason") else ""
            _count(out, f"pods/condition/{c.get('type')}={c.get('status')}{reason}")
    return out


WORKLOAD_STATUS = ("replicas", "readyReplicas", "availableReplicas", "updatedReplicas", "currentReplicas",
                   "succeeded", "failed", "active", "numberReady", "desiredNumberScheduled",
                   "currentNumberScheduled", "numberMisscheduled")


def workload_facts(workloads: Iterable[tuple[str, Obj]], pods: Iterable[Obj]) -> Facts:
    """Per workload (kind/name): its status counts and True conditions, and its pods by live, succeeded and
    failed (pods matched to it by their controller ownerReference's uid)."""
    by_owner: dict[str, Counter[str]] = {}
    for p in pods:
        for o in p["metadata"].get("ownerReferences") or []:
            if o.get("controller"):
                phase = (p.get("status") or {}).get("phase")
                state = ("terminating" if p["metadata"].get("deletionTimestamp") else
                         "succeeded" if phase == "Succeeded" else "failed" if phase == "Failed" else "live")
                by_owner.setdefault(str(o["uid"]), Counter())[state] += 1
    out: Facts = {}
    for kind, obj in workloads:
        key = f"{kind}/{obj['metadata']['name']}"
        out[key] = True
        status = obj.get("status") or {}
        for field in WORKLOAD_STATUS:
            if field in status:
                out[f"{key}/status/{field}"] = int(status[field])
        for c in status.get("conditions") or []:
            if c.get("status") == "True":
                out[f"{key}/condition/{c.get('type')}"] = True
        for state, n in sorted(by_owner.get(str(obj["metadata"].get("uid")), Counter()).items()):
            out[f"{key}/pods/{state}"] = n
    return out


def yunikorn_facts(yunikorn: Mapping[str, Any] | None, namespace: str | None = None) -> Facts:
    """YuniKorn's books at the end: allocations of the namespace's applications, the pods its queue books
    (`root.<namespace>`, named here without the namespace, which differs per trial) and the shim cache's counts."""
    if yunikorn is None:
        return {}
    out: Facts = {"yunikorn/allocations": 0}
    for queue in _queues(yunikorn.get("queues") or {}):
        name = str(queue.get("queuename", ""))
        if namespace is not None and name == f"root.{namespace}":
            out["yunikorn/queue/pods"] = int((queue.get("allocatedResource") or {}).get("pods", 0))
    for app in yunikorn.get("apps") or []:
        for a in app.get("allocations") or []:
            tags = a.get("allocationTags") or {}
            if namespace is None or tags.get("kubernetes.io/meta/namespace", namespace) == namespace:
                _count(out, "yunikorn/allocations")
    stats = (yunikorn.get("cache") or {}).get("statistics") or {}
    for name in ("assumed", "podsAssigned", "orphaned"):
        if name in stats:
            out[f"yunikorn/cache/{name}"] = int(stats[name])
    return out


def _queues(tree: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    yield tree
    for child in tree.get("children") or []:
        yield from _queues(child)


@dataclass(frozen=True)
class Divergence:
    """One fact a trial ended with that the clean runs all agree on otherwise."""

    fact: str
    clean: Fact
    trial: Fact

    def __str__(self) -> str:
        return f"{self.fact}: {self.trial} (every clean run: {self.clean})"


@dataclass(frozen=True)
class Baseline:
    """What K clean runs of one workload agree on (`stable`), and the facts that differ between them (`masked`,
    never judged)."""

    runs: int
    stable: dict[str, Fact]
    masked: frozenset[str]

    @classmethod
    def learn(cls, states: Sequence[Facts]) -> Baseline:
        """The baseline of clean runs' end states; ValueError for fewer than MIN_CLEAN_RUNS."""
        if len(states) < MIN_CLEAN_RUNS:
            raise ValueError(f"a baseline needs at least {MIN_CLEAN_RUNS} clean runs, not {len(states)}")
        keys = set().union(*(s.keys() for s in states))
        stable: dict[str, Fact] = {}
        masked: set[str] = set()
        for k in sorted(keys):
            values = {s.get(k, ABSENT) for s in states}
            if len(values) == 1:
                stable[k] = values.pop()
            else:
                masked.add(k)
        return cls(len(states), stable, frozenset(masked))

    def diverged(self, state: Facts) -> list[Divergence]:
        """Every unmasked fact of `state` that differs from the clean runs', a fact they never had included."""
        out = [Divergence(k, v, state.get(k, ABSENT)) for k, v in self.stable.items()
               if state.get(k, ABSENT) != v]
        out += [Divergence(k, ABSENT, v) for k, v in sorted(state.items())
                if k not in self.stable and k not in self.masked]
        return sorted(out, key=lambda d: d.fact)

    def masked_state(self, state: Facts) -> tuple[tuple[str, Fact], ...]:
        """The state with the masked facts left out, as a comparable key."""
        return tuple(sorted((k, v) for k, v in state.items() if k not in self.masked))


def distinct_end_states(states: Sequence[Facts], baseline: Baseline) -> list[Facts]:
    """The distinct end states among replays of one profile under different event orders, once masked; more than
    one is the nondeterminism finding."""
    seen: dict[tuple[tuple[str, Fact], ...], Facts] = {}
    for s in states:
        seen.setdefault(baseline.masked_state(s), s)
    return list(seen.values())
