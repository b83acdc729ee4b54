"""YuniKorn's books after node churn: no allocation on a node that is gone, no foreign allocation for a pod that
terminated, and a pod YuniKorn placed on a node the rig deleted, never bound, is scheduled again.

Pure: the apiserver's pods and nodes, YuniKorn's applications and nodes (REST), its shim cache, and the nodes the
rig deleted (name -> when) in; violations out. Judged once the cluster is quiet.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping
from typing import Any

from kube_fault_proxy.rig.invariants.catalogue import Violation
from kube_fault_proxy.rig.invariants.placement import ref

Obj = dict[str, Any]
NODE_LOSS = ("no-allocation-on-missing-node", "no-foreign-allocation-for-terminated-pod",
             "assumed-pod-rescheduled")


def _allocations(yk: Obj) -> Iterator[tuple[Obj, str]]:
    """Every allocation YuniKorn books for a YuniKorn pod: (allocation, its node)."""
    for app in yk.get("apps") or []:
        for alloc in app.get("allocations") or []:
            yield alloc, str(alloc.get("nodeId", ""))


def _foreign(yk: Obj) -> Iterator[tuple[Obj, str]]:
    """Every foreign allocation (a pod YuniKorn did not schedule) on YuniKorn's nodes: (allocation, its node)."""
    nodes = yk.get("nodes")
    for node in nodes if isinstance(nodes, list) else []:
        for alloc in node.get("foreignAllocations") or []:
            yield alloc, str(alloc.get("nodeId") or node.get("nodeID", ""))


def _who(alloc: Obj) -> str:
    tags = alloc.get("allocationTags") or {}
    name = tags.get("kubernetes.io/meta/podName", alloc["allocationKey"])
    return f"{tags.get('kubernetes.io/meta/namespace', '?')}/{name}"


def _in(alloc: Obj, namespace: str | None) -> bool:
    return namespace is None or (alloc.get("allocationTags") or {}).get("kubernetes.io/meta/namespace") == namespace


def on_missing_node(yk: Obj, nodes: list[Obj], namespace: str | None = None) -> Iterator[Violation]:
    """`no-allocation-on-missing-node`: every allocation, YuniKorn's or foreign, names a node that exists."""
    names = {n["metadata"]["name"] for n in nodes}
    for kind, allocs in (("allocation", _allocations(yk)), ("foreign", _foreign(yk))):
        for alloc, node in allocs:
            if node and node not in names and _in(alloc, namespace):
                yield Violation("no-allocation-on-missing-node",
                                f"{'foreign allocation' if kind == 'foreign' else 'allocation'} {_who(alloc)} is "
                                f"booked on {node}, which does not exist", (_who(alloc),), kind, node)


def foreign_for_terminated(yk: Obj, pods: list[Obj], namespace: str | None = None) -> Iterator[Violation]:
    """`no-foreign-allocation-for-terminated-pod`: every foreign allocation's pod exists and has not terminated."""
    by_uid = {p["metadata"]["uid"]: p for p in pods}
    for alloc, node in _foreign(yk):
        if not _in(alloc, namespace):
            continue
        pod = by_uid.get(alloc["allocationKey"])
        if pod is None:
            yield Violation("no-foreign-allocation-for-terminated-pod",
                            f"foreign allocation {_who(alloc)} on {node}: the pod does not exist", (_who(alloc),),
                            "no-pod", node)
        elif pod["status"].get("phase") in ("Succeeded", "Failed"):
            yield Violation("no-foreign-allocation-for-terminated-pod",
                            f"foreign allocation {ref(pod)} on {node}: the pod is {pod['status']['phase']}",
                            (ref(pod),), "terminated", node)


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def not_rescheduled(yk: Obj, pods: list[Obj], lost: Mapping[str, float], namespace: str | None = None,
                    ) -> Iterator[Violation]:
    """`assumed-pod-rescheduled`: a YuniKorn pod still unbound and Pending that YuniKorn (an allocation, or the shim
    cache) holds on a node the rig deleted was never scheduled again."""
    if not lost:
        return
    mine = [p for p in pods if p["spec"].get("schedulerName") == "yunikorn"
            and (namespace is None or p["metadata"].get("namespace") == namespace)]
    by_uid = {p["metadata"]["uid"]: p for p in mine}
    held: dict[str, tuple[Obj, str, str]] = {}
    for alloc, node in _allocations(yk):
        pod = by_uid.get(alloc["allocationKey"])
        if pod is not None and node in lost:
            held.setdefault(ref(pod), (pod, node, "allocation"))
    by_ref = {ref(p): p for p in mine}
    for who, cached in sorted(((yk.get("cache") or {}).get("pods") or {}).items()):
        pod, node = by_ref.get(who), str(cached.get("nodeName") or "")
        if pod is not None and node in lost:
            held.setdefault(who, (pod, node, "shim-cache"))
    for who, (pod, node, where) in sorted(held.items()):
        if pod["spec"].get("nodeName") or pod["status"].get("phase") != "Pending":
            continue
        by = "an allocation" if where == "allocation" else "the shim cache"
        yield Violation("assumed-pod-rescheduled",
                        f"{who} is Pending and unbound, but {by} holds it on {node}, which the rig deleted at "
                        f"{_iso(lost[node])}: it is never scheduled again", (who,), where, node)


def check_node_loss(yk: Obj, pods: list[Obj], nodes: list[Obj], lost: Mapping[str, float],
                    namespace: str | None = None) -> list[Violation]:
    """Every node-loss invariant."""
    return [*on_missing_node(yk, nodes, namespace), *foreign_for_terminated(yk, pods, namespace),
            *not_rescheduled(yk, pods, lost, namespace)]
