"""What a recorded history says, indexed for the excuse rules (excuses.py): each workload's uid, each pod, each
owner's stretches of surplus (live pods over what it may have), and each Job's pods that ever succeeded."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kube_fault_proxy.rig.controllers.workload_checks import Generations
from kube_fault_proxy.rig.controllers.world import (
    World,
    daemon_limit,
    daemon_node,
    live,
    owner,
    replicas,
    succeeded,
    uid,
)
from kube_fault_proxy.rig.invariants.history import History
from kube_fault_proxy.rig.invariants.placement import Obj, ref


@dataclass
class Surplus:
    """A stretch of time an owner (a DaemonSet: on one node) had more live pods than it may: from `start` to `end`
    (None: to the end of the history), at most `peak` over."""

    start: float
    peak: int
    end: float | None = None


@dataclass
class Facts:
    """What the history says, indexed for the rules: workloads by (kind, ref) -> uid, pods by (ns, name), and
    each owner's stretches of surplus, by (owner uid, node)."""

    workloads: dict[tuple[str, str], str] = field(default_factory=dict)
    pods: dict[tuple[str, str], Obj] = field(default_factory=dict)
    surplus: dict[tuple[str, str], list[Surplus]] = field(default_factory=dict)
    succeeded: dict[str, dict[str, Obj]] = field(default_factory=dict)  # Job uid -> pod uid -> pod, ever succeeded
    end: float = 0.0


def _over(world: World, kind: str, obj: Obj, generations: Mapping[str, Generations]) -> dict[str, int]:
    """Live pods over what the workload may have now, per node for a DaemonSet ('' otherwise)."""
    pods = world.live_pods_of(uid(obj))
    if kind == "ReplicaSet":
        window = generations[uid(obj)].acted_on(obj) if uid(obj) in generations else None
        return {"": len(pods) - (window[2] if window is not None else replicas(obj))}
    if kind == "Job":
        parallelism = obj["spec"].get("parallelism")
        return {"": len(pods) - (1 if parallelism is None else int(parallelism))}
    by: dict[str, int] = {}
    for p in pods:
        node = daemon_node(p)
        if node is not None:
            by[node] = by.get(node, 0) + 1
    return {n: c - daemon_limit(obj) for n, c in by.items()}


def facts(history: History) -> Facts:
    """The history replayed in etcd's order: each owner's stretches of surplus (ReplicaSet, Job, DaemonSet)."""
    world, out = World(), Facts(end=history.end)
    generations: dict[str, Generations] = {}
    now: dict[tuple[str, str], Surplus] = {}
    for change in history.ordered():
        obj = change.obj
        old = world.remove(change.kind, obj) if change.type == "DELETED" else world.put(change.kind, obj)
        if change.kind == "Pod":
            out.pods[(str(obj["metadata"].get("namespace", "")), str(obj["metadata"]["name"]))] = obj
            job = owner(obj)
            if job is not None and job[0] == "Job" and succeeded(obj):
                out.succeeded.setdefault(job[1], {})[uid(obj)] = obj
        elif change.type != "DELETED":
            out.workloads[(change.kind, ref(obj))] = uid(obj)
            if change.kind == "ReplicaSet":
                generations.setdefault(uid(obj), Generations()).see(obj)
        touched: list[tuple[str, Obj]] = []
        if change.kind in ("ReplicaSet", "Job", "DaemonSet") and change.type != "DELETED":
            touched.append((change.kind, obj))
        elif change.kind in ("ReplicaSet", "Job", "DaemonSet"):  # gone, and its pods with it: no surplus left
            for key in [k for k in now if k[0] == uid(obj)]:
                now.pop(key).end = change.t
        o = owner(obj) if change.kind == "Pod" else None
        joined = o is not None and change.type != "DELETED" and live(obj) and not (
            old is not None and live(old) and owner(old) == o)
        if o is not None and o[0] in ("ReplicaSet", "Job", "DaemonSet") and o[1] in world.objects[o[0]]:
            touched.append((o[0], world.objects[o[0]][o[1]]))
        for kind, w in touched:
            over = _over(world, kind, w, generations)
            for node in {n for (u, n) in now if u == uid(w)} | set(over):
                key, n = (uid(w), node), over.get(node, 0)
                if n > 0 and key not in now and joined and owner(obj) == (kind, uid(w)):
                    # A stretch begins where the invariant judges: a pod joining its owner over the limit (a
                    # scale-down's surplus, which may linger, begins none).
                    now[key] = Surplus(change.t, n)
                    out.surplus.setdefault(key, []).append(now[key])
                elif n > 0 and key in now:
                    now[key].peak = max(now[key].peak, n)
                elif n <= 0 and key in now:
                    now.pop(key).end = change.t
    return out
