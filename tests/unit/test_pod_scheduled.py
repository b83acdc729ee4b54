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


def test_bound_pods_without_scheduled_true_are_caught() -> None:
    pods = [pod("ok", "n1", "True"), pod("pending", None, "False", reason="Unschedulable"),
            pod("lost", "n1", "False", reason="SchedulerError", message="binding rejected: timeout"),
            pod("bare", "n2", None), pod("other", "n1", "False", scheduler="yunikorn")]
    found = check_scheduled(pods, {"default-scheduler"})
    assert [v.message for v in found] == [
        "ns/bare is bound to n2 with no PodScheduled condition",
        "ns/lost is bound to n1 with PodScheduled=False (SchedulerError: binding rejected: timeout)"]
    assert [v.kind for v in found] == ["missing", "SchedulerError"] and found[1].node == "n1"
    assert check_scheduled(pods, {"default-scheduler"}, ["elsewhere"]) == []
    assert check_scheduled(pods, set()) == []
