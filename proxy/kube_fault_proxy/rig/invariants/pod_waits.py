"""`no-pod-waits-past-bound`: once the faults end, no pod of the scheduler waits unbound longer than a bound.

kube-scheduler's asynchronous API calls (KEP-5229, gate SchedulerAsyncAPICalls) queue the Binding behind
the pod status patches in one dispatcher; kubernetes#135900 is a backlog of those patches throttling
client-go and delaying Bind, and #134400 the regression with a slow apiserver that turned the gate off in
1.34. A pod's wait is counted from the later of its creation and the faults' end, to its bind (or to the
end of what was seen, if it is still unbound). A pod its scheduler last called Unschedulable waits for
room, not for the scheduler (`stranded` judges room), and is left out. Pure: a recorded History, or pods
with their PodScheduled condition, in; violations out.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass

from kube_fault_proxy.rig.invariants.catalogue import Violation
from kube_fault_proxy.rig.invariants.history import History
from kube_fault_proxy.rig.invariants.placement import Obj, ref
from kube_fault_proxy.rig.invariants.pod_scheduled import condition

NAME = "no-pod-waits-past-bound"
# kube-scheduler retries a schedulable pod it failed within its backoff (podMaxBackoffSeconds, 10 s) and
# flushes the unschedulable pool every 20 s (the rig's --pod-max-in-unschedulable-pods-duration): a pod it
# would still place is bound within ~30 s of the faults' end; 10 s more for a busy two-core machine.
DEFAULT_BOUND = 40.0


@dataclass(frozen=True)
class Wait:
    """One pod's wait: created and bound (None: never seen bound) and gone (None: still there), epoch seconds."""

    pod: Obj  # the last state seen
    created: float
    bound: float | None
    gone: float | None = None


def _time(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _unschedulable(pod: Obj) -> bool:
    c = condition(pod, "PodScheduled")
    return c is not None and c.get("status") == "False" and c.get("reason") == "Unschedulable"


def judge_waits(waits: Iterable[Wait], schedulers: set[str], faults_end: float, now: float,
                bound: float = DEFAULT_BOUND) -> list[Violation]:
    """Each pod of these schedulers that waited unbound longer than `bound` seconds after `faults_end`."""
    out = []
    for w in sorted(waits, key=lambda w: ref(w.pod)):
        pod = w.pod
        if pod["spec"].get("schedulerName", "default-scheduler") not in schedulers:
            continue
        start = max(w.created, faults_end)
        if w.bound is not None:
            end, how = w.bound, f"was bound to {pod['spec'].get('nodeName') or '?'}"
        else:
            if _unschedulable(pod):
                continue
            end = w.gone if w.gone is not None else now
            how = "was deleted unbound" if w.gone is not None else "is still unbound"
        waited = end - start
        if waited > bound:
            since = "the faults ended" if faults_end >= w.created else "it was created"
            out.append(Violation(NAME, f"{ref(pod)} {how} {waited:.1f}s after {since} (bound {bound:g}s)",
                                 (ref(pod),), "unbound" if w.bound is None else "late",
                                 pod["spec"].get("nodeName") or "",
                                 numbers={"waited": round(waited, 1), "bound": bound}))
    return out


def waits_from_history(history: History) -> list[Wait]:
    """Each pod's wait as a recorded history saw it: first seen, first seen with a node, deleted."""
    first: dict[str, float] = {}
    bound: dict[str, float] = {}
    gone: dict[str, float] = {}
    last: dict[str, Obj] = {}
    for c in history.ordered():
        if c.kind != "Pod":
            continue
        key = c.obj["metadata"].get("uid") or ref(c.obj)
        created = _time(c.obj["metadata"].get("creationTimestamp"))
        first.setdefault(key, created if created is not None else c.t)
        if c.obj["spec"].get("nodeName"):
            bound.setdefault(key, c.t)
        if c.type == "DELETED":
            gone.setdefault(key, c.t)
        last[key] = c.obj
    return [Wait(last[k], first[k], bound.get(k), gone.get(k)) for k in last]


def waits_from_pods(pods: Iterable[Obj]) -> list[Wait]:
    """Each pod's wait as it shows now: created, and bound when its PodScheduled=True condition last changed
    (a bound pod without it, placed by nodeName or left False, counts as bound at creation here)."""
    out = []
    for pod in pods:
        created = _time(pod["metadata"].get("creationTimestamp")) or 0.0
        at = None
        if pod["spec"].get("nodeName"):
            c = condition(pod, "PodScheduled")
            at = (_time(c.get("lastTransitionTime")) if c is not None and c.get("status") == "True" else None) \
                or created
        out.append(Wait(pod, created, at))
    return out


def check_waits(history: History, schedulers: set[str], faults_end: float,
                bound: float = DEFAULT_BOUND) -> list[Violation]:
    """The invariant over a recorded history (the end of what was seen is its end)."""
    return judge_waits(waits_from_history(history), schedulers, faults_end, history.end, bound)
