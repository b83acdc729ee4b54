"""Invariants after a run: stranded pods, the safety every scheduler keeps (safety.py) and, for
YuniKorn, its bookkeeping (I1-I5; every invariant is named in catalogue.py).

The evaluation is pure (a Snapshot in, violations out); fetching a snapshot and waiting for the
cluster to go quiet are separate, so every invariant is tested on recorded payloads.
"""

from __future__ import annotations

import datetime
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from lightkube import Client

from kube_fault_proxy.kube.kubeapi import Node, Pod
from kube_fault_proxy.rig.invariants import catalogue
from kube_fault_proxy.rig.invariants.catalogue import INVARIANTS, Violation
from kube_fault_proxy.rig.invariants.node_loss import NODE_LOSS, check_node_loss
from kube_fault_proxy.rig.invariants.placement import quantity
from kube_fault_proxy.rig.invariants.placement import ref as _ref
from kube_fault_proxy.rig.invariants.placement import terminated as _terminated
from kube_fault_proxy.rig.invariants.safety import SAFETY, check_safety

__all__ = ["INVARIANTS", "TABLE_HEADERS", "Report", "Snapshot", "Violation", "all_bound", "check_generic",
           "check_yunikorn", "evaluate", "fetch", "render", "table_rows", "verdict_line", "wait_quiet"]

Obj = dict[str, Any]


@dataclass
class Snapshot:
    """What the apiserver and (optionally) YuniKorn say at one moment."""

    pods: list[Obj]
    nodes: list[Obj]
    now: float
    yunikorn: dict[str, Any] | None = None  # {"queues": tree, "apps": [...], "cache": rmDiagnostics.cache}
    # Nodes the rig cordoned: name -> a moment (epoch seconds) by which it was cordoned. Only these
    # cordons are judged (no-bind-to-cordoned-node); a node's spec.unschedulable says if it still is.
    cordoned: dict[str, float] = field(default_factory=dict)
    # Nodes the rig deleted (node churn steps): name -> when (epoch seconds), the last time. A pod YuniKorn
    # still holds on one, unbound, was never scheduled again (assumed-pod-rescheduled).
    lost: dict[str, float] = field(default_factory=dict)

    def signature(self) -> tuple[Any, ...]:
        """Changes while the cluster is still busy; stable once it is quiet."""
        phases = Counter((p["status"].get("phase"), bool(p["spec"].get("nodeName"))) for p in self.pods)
        yk: tuple[Any, ...] = ()
        if self.yunikorn is not None:
            allocs = sum(len(a.get("allocations") or []) for a in self.yunikorn["apps"])
            stats = self.yunikorn["cache"].get("statistics", {})
            yk = (allocs, stats.get("assumed", 0), stats.get("podsAssigned", 0))
        return (tuple(sorted(phases.items(), key=str)), *yk)


@dataclass
class Report:
    """The verdict and every violation, with counts for the summary."""

    violations: list[Violation] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    checked: list[str] = field(default_factory=list)
    quiet: bool = True
    # Breaks the proxy's journal excuses (invariants/excuses.py): the faults' own effect, shown, never a violation.
    excused: list[tuple[Violation, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing is violated."""
        return not self.violations

    def by_invariant(self) -> dict[str, list[Violation]]:
        """Violations grouped by invariant, in checking order."""
        return {name: [v for v in self.violations if v.invariant == name] for name in self.checked}

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"verdict": "clean" if self.ok else "violations", "quiet": self.quiet, "counts": self.counts,
                "invariants": {key: {"holds": not vs, "name": catalogue.KNOWN[key].name,
                                     "description": catalogue.KNOWN[key].meaning, "violations": len(vs)}
                               for key, vs in self.by_invariant().items()},
                "violations": [v.as_dict() for v in self.violations],
                **({"excused": [{**v.as_dict(), "why": why} for v, why in self.excused]} if self.excused else {})}


def _quantity(value: str) -> float:
    """A Kubernetes quantity as a float (cpu in cores, memory in bytes)."""
    return float(quantity(value))


def _requests(pod: Obj) -> tuple[float, float]:
    cpu = mem = 0.0
    for c in pod["spec"].get("containers", []):
        req = (c.get("resources") or {}).get("requests") or {}
        cpu += _quantity(req.get("cpu", "0"))
        mem += _quantity(req.get("memory", "0"))
    return cpu, mem


def _age(pod: Obj, now: float) -> float:
    created = datetime.datetime.fromisoformat(pod["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    return now - created.timestamp()


def _in(pod: Obj, namespace: str | None) -> bool:
    return namespace is None or pod["metadata"].get("namespace") == namespace


def check_generic(snap: Snapshot, schedulers: set[str], grace: float, namespace: str | None = None) -> list[Violation]:
    """Stranded pods (with room somewhere) and pods bound to nodes that do not exist."""
    nodes = {n["metadata"]["name"]: n for n in snap.nodes}
    free: dict[str, list[float]] = {}
    for name, node in nodes.items():
        alloc = node["status"].get("allocatable", {})
        free[name] = [_quantity(alloc.get("cpu", "0")), _quantity(alloc.get("memory", "0")),
                      _quantity(alloc.get("pods", "0"))]
    out: list[Violation] = []
    for pod in snap.pods:
        node = pod["spec"].get("nodeName")
        if node and not _terminated(pod):
            if node not in nodes and _in(pod, namespace):
                out.append(Violation("missing-node", f"{_ref(pod)} is bound to {node}, which does not exist",
                                     (_ref(pod),)))
            else:
                cpu, mem = _requests(pod)
                free[node][0] -= cpu
                free[node][1] -= mem
                free[node][2] -= 1
    for pod in snap.pods:
        if (not _in(pod, namespace) or pod["spec"].get("schedulerName", "default-scheduler") not in schedulers
                or pod["spec"].get("nodeName")
                or pod["status"].get("phase") != "Pending" or _age(pod, snap.now) < grace):
            continue
        cpu, mem = _requests(pod)
        room = [n for n, (c, m, p) in free.items() if c >= cpu and m >= mem and p >= 1]
        if room:
            out.append(Violation("stranded", f"{_ref(pod)} is Pending with no node for {_age(pod, snap.now):.0f}s "
                                             f"while {len(room)} nodes have room", (_ref(pod),),
                                 numbers={"checkedAt": snap.now},
                                 room={n: str(nodes[n]["metadata"].get("resourceVersion") or "") for n in room}))
    return out


def _leaf_queues(tree: Obj) -> dict[str, Obj]:
    out: dict[str, Obj] = {}
    stack = [tree]
    while stack:
        q = stack.pop()
        if q.get("isLeaf"):
            out[q["queuename"]] = q
        stack += q.get("children") or []
    return out


def check_yunikorn(snap: Snapshot, namespace: str | None = None) -> list[Violation]:
    """I1-I5 from YuniKorn's REST API and its shim cache dump, against the apiserver.

    With a namespace, only that namespace's queue, allocations and pods are judged; I5 then counts the assumed
    pods the shim's dump names in that namespace (its `schedulingState`), not the cluster-wide statistic."""
    assert snap.yunikorn is not None
    yk = snap.yunikorn
    pods = [p for p in snap.pods if p["spec"].get("schedulerName") == "yunikorn"]
    all_by_uid = {p["metadata"]["uid"]: p for p in pods}
    pods = [p for p in pods if _in(p, namespace)]
    by_ref = {_ref(p): p for p in pods}
    cache = yk.get("cache") or {}
    out = _queues_book_bound_pods(snap, yk, pods, namespace)
    allocations, allocated, asked = _allocations_match_pods(yk, pods, all_by_uid, namespace)
    out += allocations
    out += _pending_pods_are_asked(pods, asked, allocated)
    out += _shim_cache_matches_apiserver(cache, by_ref, namespace)
    out += _nothing_left_assumed(cache, by_ref, namespace)
    return out


def _queues_book_bound_pods(snap: Snapshot, yk: Obj, pods: list[Obj], namespace: str | None) -> list[Violation]:
    """I1: each leaf queue books as many pods as are bound in its namespace; judging the whole cluster, the root
    queue as many as are bound of all YuniKorn's pods (a queue's usage is its children's, recursively, and foreign
    pods are booked on nodes, never in a queue), so a pod left booked in a leaf queue removed since still counts."""
    out: list[Violation] = []
    # A pod bound to a node that no longer exists holds no place YuniKorn could book (node removal releases
    # its allocation; PodGC deletes it later): `missing-node` judges it, not I1.
    nodes = {n["metadata"]["name"] for n in snap.nodes}
    bound_per_ns = Counter(p["metadata"]["namespace"] for p in pods
                           if p["spec"].get("nodeName") in nodes and not _terminated(p))
    root = yk["queues"]
    if namespace is None and root.get("queuename") == "root":
        booked, bound = int((root.get("allocatedResource") or {}).get("pods", 0)), sum(bound_per_ns.values())
        if booked != bound:
            out.append(Violation("I1", f"queue root books {booked} pods; {bound} are bound in all namespaces",
                                 ("root",), numbers={"booked": booked, "bound": bound}))
    for name, queue in sorted(_leaf_queues(yk["queues"]).items()):
        queue_ns = name.split(".", 1)[1] if name.startswith("root.") else name
        if namespace is not None and queue_ns != namespace:
            continue
        booked = int((queue.get("allocatedResource") or {}).get("pods", 0))
        if booked != bound_per_ns.get(queue_ns, 0):
            out.append(Violation("I1", f"queue {name} books {booked} pods; {bound_per_ns.get(queue_ns, 0)} are bound "
                                       f"in namespace {queue_ns}", (name,),
                                 numbers={"booked": booked, "bound": bound_per_ns.get(queue_ns, 0)}))
    return out


def _allocations_match_pods(yk: Obj, pods: list[Obj], all_by_uid: dict[str, Obj],
                            namespace: str | None) -> tuple[list[Violation], set[str], set[str]]:
    """I2: every allocation is a pod bound to its node; with the allocation keys and the asks seen (for I3)."""
    by_uid = {p["metadata"]["uid"]: p for p in pods}
    out: list[Violation] = []
    allocated: set[str] = set()
    asked: set[str] = set()
    for app in yk["apps"]:
        asked |= {r["allocationKey"] for r in app.get("requests") or []}
        for alloc in app.get("allocations") or []:
            key, node = alloc["allocationKey"], alloc.get("nodeId", "")
            allocated.add(key)
            pod = by_uid.get(key)
            tags = alloc.get("allocationTags") or {}
            if namespace is not None and tags.get("kubernetes.io/meta/namespace", namespace) != namespace:
                continue
            if pod is None and key in all_by_uid:
                continue
            ref = f"{tags.get('kubernetes.io/meta/namespace', '?')}/{tags.get('kubernetes.io/meta/podName', key)}"
            if pod is None:
                out.append(Violation("I2", f"allocation {ref} on {node}: the pod does not exist", (ref,), "no-pod"))
            elif not pod["spec"].get("nodeName"):
                out.append(Violation("I2", f"phantom allocation: {ref} is booked on {node} but the pod is unbound "
                                           f"({pod['status'].get('phase')})", (ref,), "phantom"))
            elif pod["spec"]["nodeName"] != node:
                out.append(Violation("I2", f"allocation {ref} is on {node} but the pod is bound to "
                                           f"{pod['spec']['nodeName']}", (ref,), "wrong-node"))
    return out, allocated, asked


def _pending_pods_are_asked(pods: list[Obj], asked: set[str], allocated: set[str]) -> list[Violation]:
    """I3: a Pending, unbound pod has an ask or an allocation."""
    out: list[Violation] = []
    for pod in pods:
        uid = pod["metadata"]["uid"]
        if pod["status"].get("phase") == "Pending" and not pod["spec"].get("nodeName") \
                and uid not in asked and uid not in allocated:
            out.append(Violation("I3", f"{_ref(pod)} is Pending with neither an ask nor an allocation", (_ref(pod),)))
    return out


def _shim_cache_matches_apiserver(cache: Obj, by_ref: dict[str, Obj], namespace: str | None) -> list[Violation]:
    """I4: the shim cache puts each of YuniKorn's pods on the node the apiserver has it on."""
    out: list[Violation] = []
    for ref, cached in sorted((cache.get("pods") or {}).items()):
        if namespace is not None and not ref.startswith(f"{namespace}/"):
            continue
        pod = by_ref.get(ref)
        if pod is None or cached.get("schedulerName") != "yunikorn":
            continue
        cached_node, real_node = cached.get("nodeName") or "", pod["spec"].get("nodeName") or ""
        if cached_node != real_node:
            out.append(Violation("I4", f"shim cache has {ref} on {cached_node or 'no node'}; the apiserver on "
                                       f"{real_node or 'no node'}", (ref,)))
    return out


def _nothing_left_assumed(cache: Obj, by_ref: dict[str, Obj], namespace: str | None = None) -> list[Violation]:
    """I5: the shim assumes no pod once the cluster is idle: the cluster-wide count, or with a namespace the
    assumed pods of that namespace the dump names (the dump names each assumed pod the shim still caches)."""
    refs = sorted(ref for ref, info in (cache.get("schedulingState") or {}).items() if info.get("assumed"))
    assumed = int((cache.get("statistics") or {}).get("assumed", 0))
    if namespace is not None and "schedulingState" not in cache and assumed:
        return [Violation("I5", f"{assumed} pods are still assumed by the shim and its dump names none (no "
                                "schedulingState): they cannot be told apart by namespace")]
    if namespace is not None:
        refs = [ref for ref in refs if ref.startswith(f"{namespace}/")]
        assumed = len(refs)
    if not assumed:
        return []
    named = [f"{ref} ({(by_ref.get(ref) or {}).get('status', {}).get('phase', 'gone')})" for ref in refs[:5]]
    return [Violation("I5", f"{assumed} pods are still assumed by the shim although the cluster is idle"
                            + (f": {', '.join(named)}{', …' if len(refs) > 5 else ''}" if named else ""),
                      tuple(refs))]


def evaluate(snap: Snapshot, schedulers: set[str], grace: float = 30.0, namespace: str | None = None) -> Report:
    """Every invariant that applies to this snapshot (to one namespace of it, if given)."""
    report = Report(checked=["stranded", "missing-node", *SAFETY])
    report.violations += check_generic(snap, schedulers, grace, namespace)
    report.violations += check_safety(snap.pods, snap.nodes, snap.cordoned, namespace)
    if snap.yunikorn is not None:
        report.checked += ["I1", "I2", "I3", "I4", "I5", *NODE_LOSS]
        report.violations += check_yunikorn(snap, namespace)
        report.violations += check_node_loss(snap.yunikorn, snap.pods, snap.nodes, snap.lost, namespace)
    mine = [p for p in snap.pods
            if p["spec"].get("schedulerName", "default-scheduler") in schedulers and _in(p, namespace)]
    report.counts = {"pods": len(mine), "bound": sum(1 for p in mine if p["spec"].get("nodeName")),
                     "pending": sum(1 for p in mine if p["status"].get("phase") == "Pending"),
                     "nodes": len(snap.nodes)}
    if snap.yunikorn is not None:
        report.counts["allocations"] = sum(len(a.get("allocations") or []) for a in snap.yunikorn["apps"])
        report.counts["phantomAllocations"] = sum(
            1 for v in report.violations if v.invariant == "I2" and v.kind == "phantom")
    return report


def fetch(client: Client, yunikorn_url: str | None) -> Snapshot:
    """A snapshot of the apiserver and, if given, YuniKorn."""
    pods: list[Obj] = list(client.list(Pod, namespace="*"))
    nodes: list[Obj] = list(client.list(Node))
    yk = None
    if yunikorn_url:
        with httpx.Client(base_url=yunikorn_url, timeout=30) as c:
            yk = {"queues": c.get("/ws/v1/partition/default/queues").json(),
                  "apps": c.get("/ws/v1/partition/default/applications/active").json(),
                  "nodes": c.get("/ws/v1/partition/default/nodes").json(),
                  "cache": (c.get("/debug/fullstatedump").json().get("rmDiagnostics") or {}).get("cache") or {}}
    return Snapshot(pods, nodes, time.time(), yk)


def wait_quiet(take: Callable[[], Snapshot], quiet: float, timeout: float,
               tick: Callable[[Snapshot], None] | None = None,
               done: Callable[[Snapshot], bool] | None = None) -> tuple[Snapshot, bool]:
    """Snapshots until nothing changed for `quiet` seconds, or `done` says the work is finished (or
    `timeout` passed): (last snapshot, settled)."""
    deadline = time.monotonic() + timeout
    snap = take()
    sig, since = snap.signature(), time.monotonic()
    while time.monotonic() < deadline:
        if time.monotonic() - since >= quiet or (done is not None and done(snap)):
            return snap, True
        time.sleep(min(2.0, quiet / 4))
        snap = take()
        if tick is not None:
            tick(snap)
        if snap.signature() != sig:
            sig, since = snap.signature(), time.monotonic()
    return snap, False


def all_bound(namespace: str, label: str | None = None) -> Callable[[Snapshot], bool]:
    """A `done` test for wait_quiet: every pod in the namespace (with the label, if given) is bound
    and Running, and the shim (if any) assumes none."""
    def check(snap: Snapshot) -> bool:
        pods = [p for p in snap.pods if _in(p, namespace)
                and (label is None or label in (p["metadata"].get("labels") or {}))]
        if not pods or not all(p["spec"].get("nodeName") and p["status"].get("phase") == "Running" for p in pods):
            return False
        return snap.yunikorn is None or not (snap.yunikorn["cache"].get("statistics") or {}).get("assumed")
    return check


TABLE_HEADERS = ("invariant", "holds", "violations", "examples")


def table_rows(report: Report, limit: int = 3) -> list[tuple[str, str, int, str]]:
    """One row per invariant checked: alias and name, holds (yes/NO), violations, a few examples."""
    rows = []
    for key, vs in report.by_invariant().items():
        # A node's totals say more than the list of its pods: `kfp-node-0007 cpu: 16.5 of 16 requested by 5 pods`.
        refs = [o for v in vs for o in ([v.message] if v.invariant == "no-overcommit" else v.objects)] \
            or [v.message for v in vs]
        example = ", ".join(refs[:limit]) + (f" (+{len(refs) - limit})" if len(refs) > limit else "")
        rows.append((catalogue.label(key), "yes" if not vs else "NO", len(vs), example))
    return rows


def verdict_line(report: Report) -> str:
    """The verdict and the counts, in one line."""
    counts = ", ".join(f"{k} {v}" for k, v in report.counts.items())
    verdict = "clean" if report.ok else f"{len(report.violations)} violations"
    excused = f"; {len(report.excused)} excused by the proxy's journal (the faults' effect)" if report.excused else ""
    return f"{verdict} ({counts}){excused}{'' if report.quiet else '; the cluster never went quiet'}"


def render(report: Report, limit: int = 3) -> str:
    """The table people read, as plain text (logs, reports)."""
    rows = table_rows(report, limit)
    width = max([len("invariant"), *(len(row[0]) for row in rows)])
    lines = [f"{'invariant':<{width}} {'holds':<6} {'violations':>10}  examples", "-" * 78]
    lines += [f"{name:<{width}} {holds:<6} {n:>10}  {example}" for name, holds, n, example in rows]
    lines += ["-" * 78, verdict_line(report)]
    return "\n".join(lines)
