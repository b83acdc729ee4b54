"""`check --namespace`: the scheduler invariants per namespace, merged; the workload promises beside them."""

from __future__ import annotations

from typing import Any

from kube_fault_proxy.cli.main import parser
from kube_fault_proxy.cli.workload import judged
from kube_fault_proxy.rig.invariants.check import Snapshot


def pending(name: str, namespace: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"schedulerName": "nobody", "containers": [{"resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Pending"}}


NODE = {"metadata": {"name": "n1"}, "spec": {}, "status": {"allocatable": {"cpu": "4", "memory": "1Gi", "pods": "10"}}}


def test_namespaces_are_judged_each_and_merged() -> None:
    snap = Snapshot([pending("a1", "a"), pending("a2", "a"), pending("b1", "b"), pending("c1", "c")], [NODE],
                    1796011400.0)
    one = judged(snap, {"nobody"}, 0, ["a"])
    assert [v.objects for v in one.violations] == [("a/a1",), ("a/a2",)]
    two = judged(snap, {"nobody"}, 0, ["a", "b", "a"])
    assert [v.objects for v in two.violations] == [("a/a1",), ("a/a2",), ("b/b1",)]
    assert two.counts == {"pods": 3, "bound": 0, "pending": 3, "nodes": 1}
    assert len(judged(snap, {"nobody"}, 0, []).violations) == 4


def test_check_takes_namespaces() -> None:
    args = parser().parse_args(["check", "--namespace", "a", "--namespace", "b"])
    assert args.namespace == ["a", "b"]
