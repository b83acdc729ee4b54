"""The workload objects at one moment (pods, ReplicaSets, Deployments, Jobs, StatefulSets, DaemonSets,
nodes), indexed by owner, and what each controller's spec asks of them.

Pure: plain object dicts in, counts out. A pod is live while it is neither Succeeded, Failed nor
being deleted (the controllers' own `FilterActivePods`); it belongs to the object its controller
ownerReference names, by uid.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable

from kube_fault_proxy.rig.invariants.placement import Obj, excluded_by, ref, terminated, tolerated
from kube_fault_proxy.rig.invariants.safety import LIFECYCLE_TAINTS

KINDS = ("Pod", "ReplicaSet", "Deployment", "Job", "StatefulSet", "DaemonSet", "Node")
WORKLOADS = ("ReplicaSet", "Deployment", "Job", "StatefulSet", "DaemonSet")
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
_ORDINAL = re.compile(r"-([0-9]+)$")


def uid(obj: Obj) -> str:
    """The object's uid."""
    return str(obj["metadata"]["uid"])


def owner(obj: Obj) -> tuple[str, str] | None:
    """(kind, uid) of the object's controller ownerReference, if it has one."""
    for o in obj["metadata"].get("ownerReferences") or []:
        if o.get("controller"):
            return str(o["kind"]), str(o["uid"])
    return None


def live(pod: Obj) -> bool:
    """Neither Succeeded, Failed nor being deleted: a pod its controller counts as active."""
    return not terminated(pod)


def succeeded(pod: Obj) -> bool:
    """The pod ran to completion."""
    return bool((pod.get("status") or {}).get("phase") == "Succeeded")


def revision(pod: Obj) -> str | None:
    """The controller revision a StatefulSet (or DaemonSet) pod was made from: its `controller-revision-hash` label."""
    value = (pod["metadata"].get("labels") or {}).get("controller-revision-hash")
    return str(value) if value else None


def ended(pod: Obj) -> bool:
    """The pod's containers ran to an end (Succeeded or Failed); a pod being deleted has not ended yet."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def ordinal(pod: Obj) -> int | None:
    """A StatefulSet pod's ordinal: its `apps.kubernetes.io/pod-index` label, else its name's suffix."""
    label = (pod["metadata"].get("labels") or {}).get("apps.kubernetes.io/pod-index")
    if label is not None and label.isdigit():
        return int(label)
    m = _ORDINAL.search(pod["metadata"]["name"])
    return int(m.group(1)) if m else None


def completion_index(pod: Obj) -> int | None:
    """An indexed Job pod's completion index."""
    value = (pod["metadata"].get("annotations") or {}).get(INDEX_ANNOTATION)
    return int(value) if value is not None and value.isdigit() else None


def daemon_node(pod: Obj) -> str | None:
    """The node a DaemonSet pod is for: its nodeName, else the node its required affinity names (metadata.name)."""
    if pod["spec"].get("nodeName"):
        return str(pod["spec"]["nodeName"])
    required = (((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for term in required.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and field.get("values"):
                return str(field["values"][0])
    return None


def scaled(value: int | str | None, total: int, default: str, round_up: bool) -> int:
    """An int-or-percent (maxSurge, maxUnavailable) against a total, as Kubernetes' intstr does."""
    value = default if value is None else value
    if isinstance(value, int):
        return value
    percent = int(value.rstrip("%")) * total / 100
    return math.ceil(percent) if round_up else math.floor(percent)


def max_surge(deployment: Obj) -> int:
    """How many pods above replicas a Deployment may have (0 for Recreate; default 25%, rounded up)."""
    strategy = deployment["spec"].get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0
    surge = (strategy.get("rollingUpdate") or {}).get("maxSurge")
    return scaled(surge, replicas(deployment), "25%", round_up=True)


def replicas(obj: Obj) -> int:
    """spec.replicas (default 1)."""
    value = obj["spec"].get("replicas")
    return 1 if value is None else int(value)


def daemon_limit(ds: Obj) -> int:
    """Live pods a DaemonSet may have on one node: 1, or 2 while a rolling update surges (maxSurge > 0)."""
    rolling = ((ds["spec"].get("updateStrategy") or {}).get("rollingUpdate") or {})
    surge = rolling.get("maxSurge")
    return 2 if surge not in (None, 0, "0", "0%") else 1


def eligible(ds: Obj, node: Obj) -> bool:
    """The DaemonSet's template admits the node: selector and required affinity, and every taint but the
    node lifecycle ones (which DaemonSet pods tolerate by default) tolerated."""
    template = {"metadata": {}, "spec": (ds["spec"].get("template") or {}).get("spec") or {}}
    if excluded_by(template, node) is not None:
        return False
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") \
                and not str(taint.get("key", "")).startswith(LIFECYCLE_TAINTS) and not tolerated(template, taint):
            return False
    return True


def show(kind: str, obj: Obj) -> str:
    """`ReplicaSet ns/name`."""
    return f"{kind} {ref(obj)}"


class World:
    """Every recorded object by kind and uid, with pods indexed by their controller."""

    def __init__(self, objects: Iterable[tuple[str, Obj]] = ()) -> None:
        self.objects: dict[str, dict[str, Obj]] = {k: {} for k in KINDS}
        self.owned: dict[str, set[str]] = defaultdict(set)  # controller uid -> uids of the objects it owns
        self.ever: dict[str, Obj] = {}  # every pod ever put, deleted or not, as last seen
        for kind, obj in objects:
            self.put(kind, obj)

    def put(self, kind: str, obj: Obj) -> Obj | None:
        """Add or replace an object; the one it replaced."""
        old = self.objects[kind].get(uid(obj))
        if old is not None:
            self._unindex(old)
        self.objects[kind][uid(obj)] = obj
        if kind == "Pod":
            self.ever[uid(obj)] = obj
        o = owner(obj)
        if o is not None:
            self.owned[o[1]].add(uid(obj))
        return old

    def remove(self, kind: str, obj: Obj) -> Obj | None:
        """Forget an object (deleted); the one it was."""
        old = self.objects[kind].pop(uid(obj), None)
        if old is not None:
            self._unindex(old)
        return old

    def _unindex(self, obj: Obj) -> None:
        o = owner(obj)
        if o is not None:
            self.owned[o[1]].discard(uid(obj))

    def pods_of(self, owner_uid: str) -> list[Obj]:
        """The pods an object controls, by name."""
        pods = self.objects["Pod"]
        return sorted((pods[u] for u in self.owned.get(owner_uid, ()) if u in pods), key=lambda p: ref(p))

    def live_pods_of(self, owner_uid: str) -> list[Obj]:
        """The live pods an object controls."""
        return [p for p in self.pods_of(owner_uid) if live(p)]

    def history_pods(self, uids: Iterable[str]) -> list[Obj]:
        """Pods ever seen (gone ones too), by name."""
        return sorted((self.ever[u] for u in uids if u in self.ever), key=lambda p: ref(p))

    def replicasets_of(self, deployment_uid: str) -> list[Obj]:
        """The ReplicaSets a Deployment controls."""
        sets = self.objects["ReplicaSet"]
        return sorted((sets[u] for u in self.owned.get(deployment_uid, ()) if u in sets), key=lambda r: ref(r))
