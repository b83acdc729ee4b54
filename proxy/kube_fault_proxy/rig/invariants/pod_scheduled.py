"""`bound-pod-scheduled`: every pod its scheduler bound ends with PodScheduled=True.

kube-scheduler's asynchronous API calls (KEP-5229, gate SchedulerAsyncAPICalls) send the Binding and
the pod's status patches through one dispatcher; kubernetes#139602 was a failed asynchronous bind
whose later status patch left a bound pod with PodScheduled=False. The apiserver sets the condition
True in the same write that commits a Binding (`BindingREST.setPodNodeAndMetadata`,
pkg/registry/core/pod/storage/storage.go in v1.36.3), so a bound pod with PodScheduled=False means a write
arrived out of order. A bound pod with no PodScheduled condition at all never went through a Binding: it
was created with `nodeName` (a DaemonSet's, a static or a hand-placed pod), no scheduler bound it, and its
kubelet (none under KWOK) writes the condition. It is not judged.
Pure: pods in, violations out; judged once the cluster is quiet (`check`).
"""

from __future__ import annotations

from collections.abc import Iterable

from kube_fault_proxy.rig.invariants.catalogue import Violation
from kube_fault_proxy.rig.invariants.placement import Obj, ref, terminated

NAME = "bound-pod-scheduled"


def condition(pod: Obj, kind: str) -> Obj | None:
    """The pod's condition of this type, if it has one."""
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def check_scheduled(pods: Iterable[Obj], schedulers: set[str], namespaces: Iterable[str] = ()) -> list[Violation]:
    """Every live pod of these schedulers that is bound has PodScheduled=True (in these namespaces, all if none)."""
    wanted = set(namespaces)
    out = []
    for pod in sorted(pods, key=ref):
        if not pod["spec"].get("nodeName") or terminated(pod) \
                or pod["spec"].get("schedulerName", "default-scheduler") not in schedulers \
                or (wanted and pod["metadata"].get("namespace") not in wanted):
            continue
        c = condition(pod, "PodScheduled")
        if c is not None and c.get("status") != "True":  # None: placed by nodeName, bound by no Binding
            said = f"PodScheduled={c.get('status')} ({c.get('reason') or 'no reason'}: {c.get('message') or ''})"
            out.append(Violation(NAME, f"{ref(pod)} is bound to {pod['spec']['nodeName']} with {said}",
                                 (ref(pod),), c.get("reason", ""), pod["spec"]["nodeName"]))
    return out
