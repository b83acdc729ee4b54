"""Each workload controller's promises checked on one object at one moment: a ReplicaSet or a Deployment over
its replicas, a Job over its parallelism, StatefulSet twins and mixed revisions, a DaemonSet's crowded node,
and whether a workload has converged. promises.py replays a history through these, or applies them to a
snapshot."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kube_fault_proxy.rig.controllers.world import (
    World,
    completion_index,
    daemon_limit,
    daemon_node,
    eligible,
    ended,
    max_surge,
    ordinal,
    replicas,
    revision,
    show,
    succeeded,
    uid,
)
from kube_fault_proxy.rig.invariants.catalogue import Violation
from kube_fault_proxy.rig.invariants.placement import Obj, ref


def _pods(pods: Iterable[Obj], limit: int = 8) -> str:
    names = [ref(p) for p in pods]
    return ", ".join(names[:limit]) + (f", … (+{len(names) - limit})" if len(names) > limit else "")


def _objects(obj: Obj, pods: Iterable[Obj]) -> tuple[str, ...]:
    return (ref(obj), *(ref(p) for p in pods))


def surge_limit(deployment: Obj) -> int:
    """The most pods a Deployment's ReplicaSets may ask for together: replicas + maxSurge."""
    return replicas(deployment) + max_surge(deployment)


@dataclass
class Generations:
    """A workload's generations as a history recorded them (each one's limit: a ReplicaSet's replicas, a
    Deployment's replicas + maxSurge) and the newest one its controller reported observing. The controller
    decides in a sync on the object its informer holds, writes the pods (or scales the ReplicaSets), then the
    status with `observedGeneration` set to the generation it synced
    (pkg/controller/replicaset/replica_set_utils.go, `updateReplicaSetStatus`;
    pkg/controller/deployment/sync.go, `calculateStatus`), and a later sync reads an informer that never goes
    back: so what it writes was decided on a generation between the last `observedGeneration` written before
    that write and the newest generation."""

    limit: Callable[[Obj], int] = replicas
    limits: dict[int, int] = field(default_factory=dict)  # generation -> its limit
    observed: int = 0

    def see(self, obj: Obj) -> None:
        """One recorded state of the workload."""
        self.limits.setdefault(int(obj["metadata"].get("generation") or 0), self.limit(obj))
        self.observed = max(self.observed, int((obj.get("status") or {}).get("observedGeneration") or 0))

    def acted_on(self, obj: Obj) -> tuple[int, int, int] | None:
        """(oldest, newest generation, the highest limit among them) the controller may have been acting on;
        None where one of those generations was not recorded (nothing to judge by)."""
        newest = int(obj["metadata"].get("generation") or 0)
        oldest = min(max(self.observed, 1), newest)
        span = range(oldest, newest + 1)
        if any(g not in self.limits for g in span):
            return None
        return oldest, newest, max(self.limits[g] for g in span)


def settled(rs: Obj) -> bool:
    """The ReplicaSet's status says its controller observed the current spec and counted `replicas` pods."""
    status = rs.get("status") or {}
    return int(status.get("observedGeneration") or 0) >= int(rs["metadata"].get("generation") or 0) \
        and int(status.get("replicas", -1)) == replicas(rs)


def replicaset_over(world: World, rs: Obj, joined: Obj | None = None,
                    generations: Generations | None = None) -> Violation | None:
    """`replicaset-never-over-replicas` for one ReplicaSet. At a pod joining it (a history): its live pods
    against the most replicas of any generation its controller may have been acting on (`Generations`). Now (a
    snapshot, which cannot tell a scale-down's surplus that may linger): only once its status says it settled."""
    pods, want = world.live_pods_of(uid(rs)), replicas(rs)
    if joined is None:
        if len(pods) <= want or not settled(rs):
            return None
        return Violation("replicaset-never-over-replicas",
                         f"{show('ReplicaSet', rs)} has {len(pods)} live pods, replicas {want}, and its status says "
                         f"it settled (observedGeneration {(rs.get('status') or {}).get('observedGeneration')}, "
                         f"replicas {want}): {_pods(pods)}", _objects(rs, pods), "replicaset",
                         numbers={"live": len(pods), "replicas": want})
    window = (generations or Generations()).acted_on(rs)
    if window is None or len(pods) <= window[2]:
        return None
    oldest, newest, most = window
    gens = f"generation {newest}" if oldest == newest else f"generations {oldest}-{newest}"
    return Violation("replicaset-never-over-replicas",
                     f"{show('ReplicaSet', rs)} has {len(pods)} live pods once {ref(joined)} joined, over the "
                     f"replicas ({most}) of every generation its controller may have acted on ({gens}): "
                     f"{_pods(pods)}", _objects(rs, pods), "replicaset",
                     numbers={"live": len(pods), "replicas": most, "observedGeneration": oldest,
                              "generation": newest})


def deployment_over(world: World, deployment: Obj, generations: Generations | None = None) -> Violation | None:
    """`replicaset-never-over-replicas` for a Deployment: its ReplicaSets' replicas against replicas + maxSurge
    ("the total number of old and new pods do not exceed 130% of desired pods", apps/v1 API, for maxSurge 30%).
    At a ReplicaSet scaled up (a history): against the highest replicas + maxSurge of any generation its
    controller may have been acting on (`Generations`). Now (a snapshot): only once its status says it observed
    the current generation."""
    sets = world.replicasets_of(uid(deployment))
    asked, want, surge = sum(replicas(r) for r in sets), replicas(deployment), max_surge(deployment)
    numbers: dict[str, float] = {}
    if generations is None:
        observed = int((deployment.get("status") or {}).get("observedGeneration") or 0)
        if asked <= want + surge or observed < int(deployment["metadata"].get("generation") or 0):
            return None
        over = f"over replicas {want} + maxSurge {surge}"
    else:
        window = generations.acted_on(deployment)
        if window is None or asked <= window[2]:
            return None
        oldest, newest, most = window
        over = f"over replicas {want} + maxSurge {surge}" if oldest == newest else \
            f"over replicas + maxSurge ({most}) of every generation its controller may have acted on " \
            f"(generations {oldest}-{newest})"
        numbers = {"limit": most, "observedGeneration": oldest, "generation": newest}
    pods = [p for r in sets for p in world.live_pods_of(uid(r))]
    each = ", ".join(f"{r['metadata']['name']} {replicas(r)}" for r in sets)
    return Violation("replicaset-never-over-replicas",
                     f"{show('Deployment', deployment)}'s ReplicaSets ask for {asked} pods ({each}), {over}; live "
                     f"pods: {_pods(pods)}", _objects(deployment, pods), "deployment",
                     numbers={"asked": asked, "replicas": want, "maxSurge": surge, "live": len(pods), **numbers})


def job_over(world: World, job: Obj, succeeded_uids: set[str] | None = None) -> list[Violation]:
    """`job-never-over-completions` and `indexed-job-one-success-per-index` (succeeded pods ever seen, or now)."""
    pods = world.pods_of(uid(job))
    done = [p for p in pods if succeeded(p)] if succeeded_uids is None else world.history_pods(succeeded_uids)
    out = []
    completions = job["spec"].get("completions")
    if completions is not None and len(done) > int(completions):
        out.append(Violation("job-never-over-completions",
                             f"{show('Job', job)} has {len(done)} succeeded pods, completions {completions}: "
                             f"{_pods(done)}", _objects(job, done), numbers={"succeeded": len(done),
                                                                             "completions": int(completions)}))
    if job["spec"].get("completionMode") == "Indexed":
        by_index: dict[int, list[Obj]] = {}
        for p in done:
            index = completion_index(p)
            if index is not None:
                by_index.setdefault(index, []).append(p)
        for index, twins in sorted(by_index.items()):
            if len(twins) > 1:
                out.append(Violation("indexed-job-one-success-per-index",
                                     f"{show('Job', job)} has {len(twins)} succeeded pods for index {index}: "
                                     f"{_pods(twins)}", _objects(job, twins), f"index-{index}",
                                     numbers={"index": index, "succeeded": len(twins)}))
    return out


def job_active(world: World, job: Obj, joined: Obj | None = None) -> Violation | None:
    """`job-active-within-parallelism`: live pods against spec.parallelism (default 1)."""
    pods = world.live_pods_of(uid(job))
    parallelism = job["spec"].get("parallelism")
    limit = 1 if parallelism is None else int(parallelism)
    if len(pods) <= limit:
        return None
    when = f" once {ref(joined)} started" if joined is not None else ""
    return Violation("job-active-within-parallelism",
                     f"{show('Job', job)} has {len(pods)} active pods{when}, parallelism {limit}: {_pods(pods)}",
                     _objects(job, pods), numbers={"active": len(pods), "parallelism": limit})


def statefulset_twins(world: World, sts: Obj) -> list[Violation]:
    """`statefulset-one-pod-per-ordinal`: pods (live or terminating: both still run) per ordinal."""
    by: dict[int, list[Obj]] = {}
    for p in world.pods_of(uid(sts)):
        n = ordinal(p)
        if n is not None:
            by.setdefault(n, []).append(p)
    return [Violation("statefulset-one-pod-per-ordinal",
                      f"{show('StatefulSet', sts)} has {len(ps)} pods for ordinal {n}: {_pods(ps)}",
                      _objects(sts, ps), f"ordinal-{n}", numbers={"ordinal": n, "pods": len(ps)})
            for n, ps in sorted(by.items()) if len(ps) > 1]


def recreating(sts: Obj) -> bool:
    """The StatefulSet updates by Recreate (KEP-3541)."""
    return bool(((sts["spec"].get("updateStrategy") or {}).get("type")) == "Recreate")


def statefulset_mixed(world: World, sts: Obj, joined: Obj) -> Violation | None:
    """`statefulset-recreate-never-mixes-revisions`: a pod made while a pod of another revision has not ended."""
    made = revision(joined)
    if not recreating(sts) or made is None:
        return None
    others = [p for p in world.pods_of(uid(sts))
              if uid(p) != uid(joined) and not ended(p) and revision(p) not in (None, made)]
    if not others:
        return None
    return Violation("statefulset-recreate-never-mixes-revisions",
                     f"{show('StatefulSet', sts)} (updateStrategy Recreate) created {joined['metadata']['name']} at "
                     f"revision {made} while {len(others)} pod(s) of another revision had not ended: {_pods(others)}",
                     _objects(sts, [joined, *others]), f"revision-{made}",
                     numbers={"other-revision": len(others)})


def _start(sts: Obj) -> int:
    return int((sts["spec"].get("ordinals") or {}).get("start", 0))


def statefulset_beyond(world: World, sts: Obj) -> Violation | None:
    """`statefulset-none-beyond-replicas-once-settled`: once it observed its generation and counts its replicas."""
    status = sts.get("status") or {}
    want = replicas(sts)
    settled = int(status.get("observedGeneration", 0)) >= int(sts["metadata"].get("generation", 0)) \
        and int(status.get("replicas", -1)) == want
    if not settled:
        return None
    end = _start(sts) + want
    beyond = [p for p in world.live_pods_of(uid(sts)) if (ordinal(p) or 0) >= end]
    if not beyond:
        return None
    return Violation("statefulset-none-beyond-replicas-once-settled",
                     f"{show('StatefulSet', sts)} is settled at replicas {want} but has live pods at ordinal {end} or "
                     f"beyond: {_pods(beyond)}", _objects(sts, beyond),
                     numbers={"replicas": want, "beyond": len(beyond)})


def daemonset_crowded(world: World, ds: Obj, node: str | None = None) -> list[Violation]:
    """`daemonset-one-pod-per-node`: live pods per node (one node's, or every node's)."""
    by: dict[str, list[Obj]] = {}
    for p in world.live_pods_of(uid(ds)):
        n = daemon_node(p)
        if n is not None and (node is None or n == node):
            by.setdefault(n, []).append(p)
    limit = daemon_limit(ds)
    return [Violation("daemonset-one-pod-per-node",
                      f"{show('DaemonSet', ds)} has {len(ps)} live pods for node {n} (at most {limit}): {_pods(ps)}",
                      _objects(ds, ps), node=n, numbers={"live": len(ps), "allowed": limit})
            for n, ps in sorted(by.items()) if len(ps) > limit]


def converged(world: World, kind: str, obj: Obj) -> tuple[bool, str]:
    """Whether the workload is what its spec asks, and if not, how far it is."""
    pods = world.live_pods_of(uid(obj))
    match kind:
        case "ReplicaSet":
            return len(pods) == replicas(obj), f"{len(pods)} live pods, replicas {replicas(obj)}"
        case "Deployment":
            status, want = obj.get("status") or {}, replicas(obj)
            pods = [p for r in world.replicasets_of(uid(obj)) for p in world.live_pods_of(uid(r))]
            ok = (int(status.get("observedGeneration", 0)) >= int(obj["metadata"].get("generation", 0))
                  and status.get("updatedReplicas", 0) == want and status.get("replicas", 0) == want
                  and len(pods) == want)
            return ok, (f"{len(pods)} live pods, {status.get('updatedReplicas', 0)} updated, replicas {want}")
        case "Job":
            conditions = {c.get("type"): c.get("status") for c in (obj.get("status") or {}).get("conditions") or []}
            ended = conditions.get("Complete") == "True" or conditions.get("Failed") == "True" \
                or bool(obj["spec"].get("suspend"))
            done = sum(1 for p in world.pods_of(uid(obj)) if succeeded(p))
            return ended and not pods, f"{len(pods)} active, {done} succeeded, not complete" if not ended else \
                f"complete with {len(pods)} pods still active"
        case "StatefulSet":
            ordinals = list(range(_start(obj), _start(obj) + replicas(obj)))
            live_ordinals = sorted(ordinal(p) or 0 for p in pods)
            if live_ordinals != ordinals:
                return False, f"live ordinals {live_ordinals}, want {ordinals}"
            if recreating(obj):  # Recreate's rollout ends with every pod at the update revision
                status = obj.get("status") or {}
                target = status.get("updateRevision")
                behind = [p["metadata"]["name"] for p in pods if revision(p) != target]
                observed = int(status.get("observedGeneration", 0)) >= int(obj["metadata"].get("generation", 0))
                if not observed or behind:
                    return False, (f"updateStrategy Recreate: {'not yet observed its spec; ' if not observed else ''}"
                                   f"pods not at update revision {target}: {behind}")
            return True, f"live ordinals {live_ordinals}"
        case "DaemonSet":
            nodes = world.objects["Node"].values()
            wanted = {n["metadata"]["name"] for n in nodes if eligible(obj, n)}
            on = sorted(daemon_node(p) or "" for p in pods)
            return on == sorted(wanted), f"{len(on)} live pods for {len(wanted)} eligible nodes"
    return True, ""
