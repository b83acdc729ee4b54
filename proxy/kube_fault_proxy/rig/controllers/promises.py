"""What the workload controllers promise, judged on a recorded history (at every moment) or on a snapshot.

Pure: a History (or a World) in, Violations out. A history is replayed in resourceVersion order (one
etcd orders every write), and each change is judged where it can break a promise: a pod joining its
controller (created or adopted live), a Job pod succeeding, a Deployment's ReplicaSet scaled up.
A violation names the object, its pods and the numbers. Each breach is reported once per object
(the first moment), with how many moments broke it.

A controller acts on the spec it has observed, not on the spec at the instant its write lands: a
ReplicaSet's pod, and a Deployment's ReplicaSet scaled up, are judged against every generation their
controller may have been acting on, from the last one it reported observing (`status.observedGeneration`)
to the newest (see `Generations`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from kube_fault_proxy.rig.controllers.workload_checks import (
    Generations,
    converged,
    daemonset_crowded,
    deployment_over,
    job_active,
    job_over,
    replicaset_over,
    statefulset_beyond,
    statefulset_mixed,
    statefulset_twins,
    surge_limit,
)
from kube_fault_proxy.rig.controllers.world import (
    WORKLOADS,
    World,
    daemon_node,
    live,
    owner,
    replicas,
    show,
    succeeded,
    uid,
)
from kube_fault_proxy.rig.invariants.catalogue import CONTROLLER_INVARIANTS, Violation
from kube_fault_proxy.rig.invariants.history import Change, History
from kube_fault_proxy.rig.invariants.placement import Obj, ref

PROMISES = tuple(i.name for i in CONTROLLER_INVARIANTS)
SNAPSHOT = tuple(p for p in PROMISES if p != "workload-converges")  # a snapshot has no time to converge in


def _affected(world: World, change: Change) -> list[tuple[str, Obj]]:
    """The workloads a change may move: itself, its controller, and that one's (a Deployment's pods)."""
    out: list[tuple[str, Obj]] = []
    if change.kind in WORKLOADS and change.type != "DELETED":
        out.append((change.kind, change.obj))
    if change.kind == "Node":
        out += [("DaemonSet", d) for d in world.objects["DaemonSet"].values()]
    o = owner(change.obj)
    while o is not None and o[0] in WORKLOADS:
        parent = world.objects[o[0]].get(o[1])
        if parent is None:
            break
        out.append((o[0], parent))
        o = owner(parent)
    return out


def _moment(world: World, change: Change, old: Obj | None, seen_succeeded: dict[str, set[str]],
            generations: dict[str, Generations]) -> list[Violation]:
    """The promises a change can break, judged right after it."""
    new, out = change.obj, []
    o = owner(new)
    if change.kind == "Pod" and o is not None and change.type != "DELETED":
        parent = world.objects.get(o[0], {}).get(o[1])
        joined = live(new) and not (old is not None and live(old) and owner(old) == o)
        if parent is not None and joined:
            match o[0]:
                case "ReplicaSet":
                    out += [v for v in [replicaset_over(world, parent, new, generations.get(o[1]))] if v]
                case "Job":
                    out += [v for v in [job_active(world, parent, new)] if v]
                case "DaemonSet":
                    out += daemonset_crowded(world, parent, daemon_node(new))
        if parent is not None and o[0] == "StatefulSet" and old is None:
            out += statefulset_twins(world, parent)
            out += [v for v in [statefulset_mixed(world, parent, new)] if v]
        if parent is not None and o[0] == "Job" and succeeded(new) and not (old is not None and succeeded(old)):
            seen_succeeded.setdefault(o[1], set()).add(uid(new))
            out += job_over(world, parent, seen_succeeded[o[1]])
    if change.kind == "ReplicaSet" and change.type != "DELETED" and o is not None and o[0] == "Deployment" \
            and (old is None or replicas(new) > replicas(old)):
        deployment = world.objects["Deployment"].get(o[1])
        out += [v for v in [deployment and deployment_over(world, deployment, generations.get(o[1]))] if v]
    return out


def judge(history: History, faults_end: float | None = None, bound: float = 60.0) -> list[Violation]:
    """Every promise over a whole history; convergence: each workload that still exists at the end reaches
    its spec within `bound` seconds of the faults' end (or of its last spec change, if later)."""
    world = World()
    first: dict[tuple[str, str, str], Violation] = {}
    moments: dict[tuple[str, str, str], int] = {}
    seen_succeeded: dict[str, set[str]] = {}
    generations: dict[str, Generations] = {}  # ReplicaSet or Deployment uid -> what its controller may have acted on
    since: dict[str, float | None] = {}  # workload uid -> when it last became converged (None: it is not)
    changed: dict[str, float] = {}  # workload uid -> when its spec (or, for a DaemonSet, the node set) last changed
    for change in history.ordered():
        old = world.remove(change.kind, change.obj) if change.type == "DELETED" else world.put(change.kind, change.obj)
        if change.kind == "ReplicaSet" and change.type != "DELETED":
            generations.setdefault(uid(change.obj), Generations()).see(change.obj)
        if change.kind == "Deployment" and change.type != "DELETED":
            generations.setdefault(uid(change.obj), Generations(limit=surge_limit)).see(change.obj)
        for v in _moment(world, change, old, seen_succeeded, generations):
            key = (v.invariant, v.objects[0], v.kind or v.node)
            first.setdefault(key, v)
            moments[key] = moments.get(key, 0) + 1
        generation = change.obj["metadata"].get("generation")
        if change.kind in WORKLOADS and (old is None or old["metadata"].get("generation") != generation):
            changed[uid(change.obj)] = change.t
        if change.kind == "Node" and change.type != "MODIFIED":
            changed.update({u: change.t for u in world.objects["DaemonSet"]})
        for kind, obj in _affected(world, change):
            ok, _ = converged(world, kind, obj)
            if not ok:
                since[uid(obj)] = None
            elif since.get(uid(obj)) is None:
                since[uid(obj)] = change.t
    out = [replace(v, numbers={**v.numbers, "moments": moments[k]}) for k, v in first.items()]
    for kind in WORKLOADS:
        for obj in world.objects[kind].values():
            if kind == "StatefulSet":
                out += [v for v in [statefulset_beyond(world, obj)] if v]
            deadline = max(faults_end or 0.0, changed.get(uid(obj), 0.0)) + bound
            ok, how = converged(world, kind, obj)
            at = since.get(uid(obj))
            if not ok:
                out.append(Violation("workload-converges", f"{show(kind, obj)} never converged: {how} when the "
                                     f"history ends ({history.end - deadline + bound:.1f}s after the faults ended or "
                                     "its spec last changed)", (ref(obj),), kind.lower(),
                                     numbers={"bound": bound}))
            elif at is not None and at > deadline:
                out.append(Violation("workload-converges", f"{show(kind, obj)} converged {at - deadline + bound:.1f}s "
                                     f"after the faults ended or its spec last changed; the bound is {bound:g}s",
                                     (ref(obj),), kind.lower(), numbers={"seconds": at - deadline + bound,
                                                                         "bound": bound}))
    return out


def check_world(world: World, namespaces: Iterable[str] = ()) -> list[Violation]:
    """Every promise a snapshot can judge (SNAPSHOT), on the workloads in these namespaces (all if none)."""
    wanted = set(namespaces)

    def mine(kind: str) -> list[Obj]:
        objs = world.objects[kind].values()
        return sorted((o for o in objs if not wanted or o["metadata"].get("namespace") in wanted), key=ref)

    out: list[Violation] = []
    for rs in mine("ReplicaSet"):
        out += [v for v in [replicaset_over(world, rs)] if v]
    for d in mine("Deployment"):
        out += [v for v in [deployment_over(world, d)] if v]
    for job in mine("Job"):
        out += job_over(world, job)
        out += [v for v in [job_active(world, job)] if v]
    for sts in mine("StatefulSet"):
        out += statefulset_twins(world, sts)
        out += [v for v in [statefulset_beyond(world, sts)] if v]
    for ds in mine("DaemonSet"):
        out += daemonset_crowded(world, ds)
    return out


def unconverged(world: World, namespaces: Iterable[str] = ()) -> list[str]:
    """Each workload (in these namespaces, all if none) that is not yet what its spec asks, and how far it is."""
    wanted = set(namespaces)
    out = []
    for kind in WORKLOADS:
        for obj in sorted(world.objects[kind].values(), key=ref):
            if wanted and obj["metadata"].get("namespace") not in wanted:
                continue
            ok, how = converged(world, kind, obj)
            if not ok:
                out.append(f"{show(kind, obj)}: {how}")
    return out
