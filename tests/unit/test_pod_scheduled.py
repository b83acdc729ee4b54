"""`bound-pod-scheduled`: a bound pod of the scheduler under test must end with PodScheduled=True."""

from __future__ import annotations

from typing import Any

from kube_fault_proxy.rig.invariants.pod_scheduled import check_scheduled


def pod(name: str, node: str | None, status: str | None, scheduler: str = "default-scheduler",
        **extra: Any) -> dict[str, Any]:
    conditions = [] if status is None else [{"type": "PodScheduled", "status": status, **extra}]
    return {"metadata": {"name": name, "namespace": "ns"}, "spec": {"schedulerName": scheduler,
                                                                   **({"nodeName": node} if node else {})},
            "status": {"phase": "Running" if node else "Pending", "conditions": conditions}}


def test_a_pod_placed_by_node_name_is_not_judged() -> None:
    """The apiserver writes PodScheduled=True with every Binding it commits; a pod with no such condition was
    created with nodeName (a DaemonSet's, under KWOK, which runs no kubelet to write it): no scheduler bound it."""
    daemon = pod("ds-x7k2p", "n1", None)
    daemon["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "ds", "uid": "u1", "controller": True}]
    assert check_scheduled([daemon, pod("by-hand", "n2", None)], {"default-scheduler"}) == []
    assert len(check_scheduled([pod("lost", "n1", "False")], {"default-scheduler"})) == 1


def test_bound_pods_without_scheduled_true_are_caught() -> None:
    pods = [pod("ok", "n1", "True"), pod("pending", None, "False", reason="Unschedulable"),
            pod("lost", "n1", "False", reason="SchedulerError", message="binding rejected: timeout"),
            pod("bare", "n2", None), pod("other", "n1", "False", scheduler="yunikorn")]
    found = check_scheduled(pods, {"default-scheduler"})
    assert [v.message for v in found] == [
        "ns/lost is bound to n1 with PodScheduled=False (SchedulerError: binding rejected: timeout)"]
    assert [v.kind for v in found] == ["SchedulerError"] and found[0].node == "n1"
    assert check_scheduled(pods, {"default-scheduler"}, ["elsewhere"]) == []
    assert check_scheduled(pods, set()) == []
