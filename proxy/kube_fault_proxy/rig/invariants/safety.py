"""The safety invariants every scheduler must keep, judged on every bound pod whoever bound it.

Pure: pods, nodes and the cordon times the rig knows in, violations out. Each judges only what the
snapshot can prove, so a real scheduler doing its job never breaks one:
- a pod being deleted, Succeeded or Failed holds no place (a scheduler may count it; we do not);
- the taints the node lifecycle controller manages (`node.kubernetes.io/...`: not-ready,
  unreachable, pressure, unschedulable) come and go under running pods and are not judged (a
  cordon is judged by `no-bind-to-cordoned-node`, with times); any other taint is taken as there
  at the Binding, unless its timeAdded is at or after the Binding's earliest moment;
- node labels are taken as they were at the Binding (the rig never relabels a node);
- a cordon is judged only where its time is known (`cordoned`, from the rig) and the node is still
  unschedulable: the Binding (no earlier than the pod's PodScheduled=True transition, nor its
  creation; second resolution) must be later than that time. A node unschedulable now with no
  known cordon time is not judged: its pods may have been bound before someone cordoned it.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Iterator, Mapping
from decimal import Decimal

from kube_fault_proxy.rig.invariants.catalogue import Violation
from kube_fault_proxy.rig.invariants.placement import (
    UNSCHEDULABLE_TAINT,
    Obj,
    allocatable,
    anti_affinity_terms,
    bind_floor,
    excluded_by,
    pod_requests,
    ref,
    term_selects,
    terminated,
    timestamp,
    tolerated,
)

SAFETY = ("no-overcommit", "no-excluded-node", "no-untolerated-taint", "no-bind-to-cordoned-node",
          "no-anti-affinity-breach")
LIFECYCLE_TAINTS = "node.kubernetes.io/"
FIRST = ("cpu", "memory", "ephemeral-storage")  # the order resources are reported in; then the rest, then pods
Placed = list[tuple[Obj, Obj]]  # (pod, its node)


def check_safety(pods: list[Obj], nodes: list[Obj], cordoned: Mapping[str, float],
                 namespace: str | None = None) -> list[Violation]:
    """Every safety invariant (with a namespace: the breaks a pod of that namespace takes part in)."""
    by_name = {n["metadata"]["name"]: n for n in nodes}
    placed = [(p, by_name[p["spec"]["nodeName"]]) for p in pods
              if p["spec"].get("nodeName") in by_name and not terminated(p)]
    return [*overcommit(placed, namespace), *excluded(placed, namespace), *untolerated(placed, namespace),
            *bound_after_cordon(placed, cordoned, namespace), *anti_affinity(placed, namespace)]


def _in(pod: Obj, namespace: str | None) -> bool:
    return namespace is None or pod["metadata"].get("namespace") == namespace


def _show(resource: str, value: int, other: int) -> str:
    """An amount in the scheduler's units (millicores, bytes, a count) as people write it."""
    if resource == "cpu":
        return format(Decimal(value) / 1000, "f")
    if resource == "pods":
        return str(value)
    for suffix, unit in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if value and value % unit == 0 and other % unit == 0:
            return f"{value // unit}{suffix}"
    return str(value)


def overcommit(placed: Placed, namespace: str | None) -> Iterator[Violation]:
    """`no-overcommit`: per node, its pods' requests against its allocatable (exactly full is fine)."""
    on: dict[str, list[Obj]] = defaultdict(list)
    nodes: dict[str, Obj] = {}
    for pod, node in placed:
        on[node["metadata"]["name"]].append(pod)
        nodes[node["metadata"]["name"]] = node
    for name, pods in sorted(on.items()):
        if not any(_in(p, namespace) for p in pods):
            continue
        alloc = allocatable(nodes[name])
        requested: dict[str, int] = defaultdict(int)
        for p in pods:
            for resource, value in pod_requests(p).items():
                requested[resource] += value
        requested["pods"] = len(pods)
        order = [*FIRST, *sorted(set(alloc) - {*FIRST, "pods"}), "pods"]
        refs = tuple(sorted(ref(p) for p in pods))
        for resource in order:
            if resource in alloc and requested.get(resource, 0) > alloc[resource]:
                have, cap = requested[resource], alloc[resource]
                what = "pods bound" if resource == "pods" else f"requested by {len(pods)} pods"
                scale = 1000 if resource == "cpu" else 1
                smallest = 1 if resource == "pods" else min(pod_requests(p).get(resource, 0) for p in pods)
                yield Violation("no-overcommit", f"{name} {resource}: {_show(resource, have, cap)} of "
                                                 f"{_show(resource, cap, have)} {what}", refs, resource, name,
                                {"requested": have / scale, "allocatable": cap / scale, "pods": len(pods),
                                 "smallest": smallest / scale})


def excluded(placed: Placed, namespace: str | None) -> Iterator[Violation]:
    """`no-excluded-node`: the pod's nodeSelector and required node affinity against its node's labels."""
    for pod, node in placed:
        why = excluded_by(pod, node) if _in(pod, namespace) else None
        if why is not None:
            kind, reason = why
            name = node["metadata"]["name"]
            yield Violation("no-excluded-node", f"{ref(pod)} is on {name}, but {reason}", (ref(pod),), kind, name)


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def untolerated(placed: Placed, namespace: str | None) -> Iterator[Violation]:
    """`no-untolerated-taint`: the NoSchedule and NoExecute taints on the pod's node against its tolerations."""
    for pod, node in placed:
        if not _in(pod, namespace):
            continue
        floor = bind_floor(pod)
        for taint in (node.get("spec") or {}).get("taints") or []:
            if taint.get("effect") not in ("NoSchedule", "NoExecute") \
                    or str(taint.get("key", "")).startswith(LIFECYCLE_TAINTS) or tolerated(pod, taint):
                continue
            added = taint.get("timeAdded")
            if added and (floor is None or timestamp(added) + 1 > floor):  # maybe tainted after the Binding
                continue
            shown = f"{taint.get('key')}{'=' + taint['value'] if taint.get('value') else ''}:{taint['effect']}"
            name = node["metadata"]["name"]
            yield Violation("no-untolerated-taint", f"{ref(pod)} is on {name}, whose taint {shown} it does not "
                                                    f"tolerate", (ref(pod),), taint["effect"], name)


def bound_after_cordon(placed: Placed, cordoned: Mapping[str, float], namespace: str | None) -> Iterator[Violation]:
    """`no-bind-to-cordoned-node`: no Binding to a node later than a moment the rig knew it cordoned."""
    for pod, node in placed:
        name = node["metadata"]["name"]
        if not _in(pod, namespace) or name not in cordoned or not (node.get("spec") or {}).get("unschedulable") \
                or tolerated(pod, UNSCHEDULABLE_TAINT):
            continue
        floor = bind_floor(pod)
        if floor is not None and floor > cordoned[name]:
            yield Violation("no-bind-to-cordoned-node", f"{ref(pod)} was bound to {name} at {_iso(floor)} or later; "
                                                        f"the node was cordoned by {_iso(cordoned[name])}",
                            (ref(pod),), node=name, numbers={"boundNoEarlierThan": floor, "cordonedBy": cordoned[name]})


def anti_affinity(placed: Placed, namespace: str | None) -> Iterator[Violation]:
    """`no-anti-affinity-breach`: each required anti-affinity term against the pods in its topology
    domain (nodes carrying the same value of its topologyKey; a node without the label is in none)."""
    seen: set[frozenset[str]] = set()
    domains: dict[str, dict[str, list[tuple[Obj, Obj]]]] = {}
    for pod, node in placed:
        for term in anti_affinity_terms(pod):
            key = str(term.get("topologyKey", ""))
            value = (node["metadata"].get("labels") or {}).get(key)
            if value is None:
                continue
            if key not in domains:
                domains[key] = defaultdict(list)
                for p, n in placed:
                    if key in (n["metadata"].get("labels") or {}):
                        domains[key][n["metadata"]["labels"][key]].append((p, n))
            for other, other_node in domains[key][value]:
                pair = frozenset((ref(pod), ref(other)))
                if other is pod or pair in seen or not (_in(pod, namespace) or _in(other, namespace)) \
                        or not term_selects(pod, term, other):
                    continue
                seen.add(pair)
                here, there = node["metadata"]["name"], other_node["metadata"]["name"]
                where = f"both on {here}" if here == there else f"on {here} and {there}, both {key}={value}"
                yield Violation("no-anti-affinity-breach",
                                f"{ref(pod)} and {ref(other)} are {where}; {ref(pod)}'s required anti-affinity "
                                f"({key}) selects {ref(other)}", (ref(pod), ref(other)), key,
                                here if here == there else "")
