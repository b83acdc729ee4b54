"""Node and pod churn steps: their schema, what each does to the cluster (a recording stand-in for lightkube's
client), and their trigger: a step on the held Binding acts on the node and pod its journal record names."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kube_fault_proxy.proxy.profiles.loader import ProfileError
from kube_fault_proxy.rig.actions import node_churn, pod_churn
from kube_fault_proxy.rig.actions.node_churn import NodeChurn, recreatable, resized
from kube_fault_proxy.rig.runs.scenario import load_scenario
from kube_fault_proxy.rig.runs.timeline import Timeline
from lightkube import ApiError

from tests.support.scenarios import timeline

NODE = {"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "kfp-node-0003", "uid": "u-1", "resourceVersion": "77", "creationTimestamp": "x",
                     "managedFields": [{}], "labels": {"type": "kwok"}, "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "spec": {"podCIDR": "10.128.2.0/24", "unschedulable": True,
                 "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
                            {"key": "team", "value": "a", "effect": "NoSchedule"}]},
        "status": {"capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                   "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]}}


class FakeApi:
    """lightkube's Client as the churn steps call it: every call recorded; nodes and pods kept by name."""

    def __init__(self, conflicts: int = 0) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.nodes: dict[str, dict[str, Any]] = {NODE["metadata"]["name"]: json.loads(json.dumps(NODE))}
        self.pods: dict[str, dict[str, Any]] = {}
        self.conflicts = conflicts  # creates answered 409 (the delete not finished yet) before one succeeds

    def get(self, res: Any, name: str, **_: Any) -> dict[str, Any]:
        return self.nodes[name]

    def delete(self, res: Any, name: str, **kw: Any) -> None:
        self.calls.append(("delete", res.__name__, name, str(kw.get("grace_period"))))
        (self.nodes if res.__name__ == "Node" else self.pods).pop(name, None)

    def create(self, obj: Any, **kw: Any) -> None:
        if self.conflicts:
            self.conflicts -= 1
            raise ApiError(status=SimpleNamespace(code=409, message="object is being deleted"))  # type: ignore[arg-type]
        self.calls.append(("create", obj["kind"], obj["metadata"]["name"]))
        (self.nodes if obj["kind"] == "Node" else self.pods)[obj["metadata"]["name"]] = dict(obj)

    def patch(self, res: Any, name: str, obj: dict[str, Any], **kw: Any) -> None:
        self.calls.append(("patch", res.__name__, name, json.dumps(obj, sort_keys=True)))

    def list(self, res: Any, **kw: Any) -> list[dict[str, Any]]:
        return list(self.pods.values())


def churn_on(api: FakeApi) -> NodeChurn:
    @contextlib.contextmanager
    def connect() -> Iterator[Any]:
        yield api
    return NodeChurn(connect)


def test_a_node_is_registered_again_as_a_kubelet_would() -> None:
    again = recreatable(NODE)
    assert again["metadata"] == {"name": "kfp-node-0003", "labels": {"type": "kwok"},
                                 "annotations": {"kwok.x-k8s.io/node": "fake"}}
    assert again["spec"] == {"podCIDR": "10.128.2.0/24", "unschedulable": True,
                             "taints": [{"key": "team", "value": "a", "effect": "NoSchedule"}]}
    assert again["status"] == {"capacity": NODE["status"]["capacity"], "allocatable": NODE["status"]["allocatable"]}


def test_a_resize_patches_capacity_and_allocatable_keeping_what_it_does_not_change() -> None:
    assert resized(NODE, "4", None, 20) == {"status": {
        "capacity": {"cpu": "4", "memory": "64Gi", "pods": "20"},
        "allocatable": {"cpu": "4", "memory": "64Gi", "pods": "20"}}}


def test_a_flap_deletes_the_node_and_creates_it_again_under_its_name() -> None:
    api = FakeApi(conflicts=2)
    churn = churn_on(api)
    before = time.time()
    what = churn.flap("kfp-node-0003", 0.05, threading.Event())
    assert [c[:3] for c in api.calls] == [("delete", "Node", "kfp-node-0003"), ("create", "Node", "kfp-node-0003")]
    assert what.startswith("flapped node kfp-node-0003: deleted, created again ")
    assert api.nodes["kfp-node-0003"]["metadata"].get("uid") is None  # a new node to every informer
    assert churn.lost["kfp-node-0003"] >= before and churn.deleted == {}


def test_a_deleted_node_comes_back_when_the_run_ends_and_only_a_deleted_one_can() -> None:
    api = FakeApi()
    churn = churn_on(api)
    churn.delete("kfp-node-0003")
    assert "kfp-node-0003" not in api.nodes and churn.deleted
    assert churn.restore_all() == ["created node kfp-node-0003 again"]
    assert "kfp-node-0003" in api.nodes and churn.restore_all() == []
    with pytest.raises(ValueError, match="did not delete that node"):
        churn.restore("kfp-node-0009")


def test_a_cordon_keeps_its_moment_for_the_checker_and_an_uncordon_drops_it() -> None:
    api = FakeApi()
    churn = churn_on(api)
    churn.cordon("kfp-node-0003", True)
    assert api.calls[-1] == ("patch", "Node", "kfp-node-0003", '{"spec": {"unschedulable": true}}')
    assert set(churn.cordoned) == {"kfp-node-0003"}
    churn.cordon("kfp-node-0003", False)
    assert api.calls[-1] == ("patch", "Node", "kfp-node-0003", '{"spec": {"unschedulable": null}}')
    assert churn.cordoned == {}


def test_a_resize_is_a_status_patch() -> None:
    api = FakeApi()
    churn_on(api).resize("kfp-node-0003", None, "8Gi", None)
    assert api.calls[-1][:3] == ("patch", "NodeStatus", "kfp-node-0003")
    assert json.loads(api.calls[-1][3])["status"]["allocatable"]["memory"] == "8Gi"


def test_foreign_pods_are_placed_by_node_name_and_terminate_as_a_kubelet_reports() -> None:
    api = FakeApi()
    assert pod_churn.create_foreign(api, "default", "r1", "kfp-node-0003", 2, "250m") == \
        "created 2 foreign pods on kfp-node-0003"  # type: ignore[arg-type]
    pod = api.pods["foreign-r1-0"]
    assert pod["spec"]["nodeName"] == "kfp-node-0003" and pod["spec"]["schedulerName"] == "kfp-foreign"
    assert pod["metadata"]["labels"] == {pod_churn.FOREIGN_LABEL: "r1"}
    assert pod_churn.terminate_foreign(api, "default", "r1") == "marked 2 foreign pods Succeeded"  # type: ignore[arg-type]
    patch = json.loads(api.calls[-1][3])["status"]
    assert patch["phase"] == "Succeeded"
    assert patch["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0


def test_held_names_what_the_trigger_record_holds() -> None:
    record = {"event": "inject", "request": {"name": "load-1", "namespace": "default", "targetNode": "kfp-node-0002"}}
    assert node_churn.resolve("held", lambda: record, "targetNode") == "kfp-node-0002"
    assert node_churn.resolve("kfp-node-0007", lambda: None, "targetNode") == "kfp-node-0007"
    with pytest.raises(ValueError, match="names no targetNode"):
        node_churn.resolve("held", lambda: {"event": "inject", "request": {"name": "x"}}, "targetNode")


@pytest.mark.parametrize(("steps", "expected"), [
    ("    - {at: 1s, flapNode: {node: held, downSeconds: 1s}}\n",
     "flapNode on the held Binding's node or pod needs onEvent inject or crash-point"),
    ("    - {afterBinds: 3, deletePod: {pod: held}}\n",
     "deletePod on the held Binding's node or pod needs onEvent inject or crash-point"),
    ("    - {at: 1s, resizeNode: {node: kfp-node-0001}}\n", "resizeNode needs at least one of cpu, memory, pods"),
    ("    - {at: 1s, deleteNode: {node: kfp-node-0001}, terminateForeignPods: true}\n",
     "a step needs exactly one of activate, deactivate, touchPods, killApiserver, killScheduler, deleteNode"),
    ("    - {at: 1s, deleteNode: {node: Bad_Name}}\n", "spec.timeline[0].deleteNode.node"),
    ("    - {at: 1s, flapNode: {node: kfp-node-0001}}\n", "spec.timeline[0].flapNode.downSeconds: required field"),
    ("    - {at: 1s, deletePod: {pod: load-0}}\n", "spec.timeline[0].deletePod.pod: Input should be 'held'"),
], ids=["held-needs-a-held-trigger", "held-pod-needs-a-held-trigger", "resize-to-nothing", "two-actions",
        "bad-node-name", "flap-without-down", "pod-by-name"])
def test_bad_churn_steps_are_refused_naming_the_field(tmp_path: Path, steps: str, expected: str) -> None:
    with pytest.raises(ProfileError) as e:
        load_scenario(timeline(tmp_path, steps))
    assert any(expected in str(p) for p in e.value.problems), [str(p) for p in e.value.problems]


def timeline_on(tmp_path: Path, steps: str, api: FakeApi) -> tuple[Timeline, Path, Any]:
    journal = tmp_path / "journal.jsonl"
    journal.write_text("")
    sampler = SimpleNamespace(cursor=0, t0=time.monotonic() - 5.0, wall0=time.time() - 5.0, events=[])
    target = SimpleNamespace(control="http://control", cluster=SimpleNamespace(journal=journal))
    scenario = load_scenario(timeline(tmp_path, steps))
    result = SimpleNamespace(steps=[])
    ls = SimpleNamespace(namespace="default", run_id="r1")
    t = Timeline(list(scenario.spec.timeline), target, 1, ls, sampler, result, False)  # type: ignore[arg-type]
    t.churn = churn_on(api)
    return t, journal, result


def test_a_flap_on_the_held_binding_flaps_the_node_the_binding_names(tmp_path: Path) -> None:
    api = FakeApi()
    t, journal, result = timeline_on(tmp_path, "    - {onEvent: inject, flapNode: {node: held, downSeconds: 0s}}\n"
                                               "    - {onEvent: inject, after: 0.5s, deletePod: {pod: held}}\n", api)
    t.run_due()
    assert api.calls == [] and len(t.pending) == 2  # nothing is held yet
    api.pods["load-1"] = {"metadata": {"name": "load-1"}}
    with journal.open("a") as f:  # the proxy holds the 10th Binding: pod load-1 to kfp-node-0003
        f.write(json.dumps({"seq": 1, "time": time.time() - 0.1, "event": "inject", "rule": "hold-the-10th-bind",
                            "request": {"verb": "create", "resource": "pods", "subresource": "binding",
                                        "namespace": "default", "name": "load-1", "targetNode": "kfp-node-0003"}})
                + "\n")
    t.run_due()
    assert [c[:3] for c in api.calls] == [("delete", "Node", "kfp-node-0003"), ("create", "Node", "kfp-node-0003")]
    assert t.last_churn is not None and t.scheduler_settling(30.0)  # the scheduler's view settles after it
    assert len(t.pending) == 1  # the deletion waits its half second
    time.sleep(0.6)
    t.run_due()
    assert api.calls[-1] == ("delete", "Pod", "load-1", "0")
    assert [s["did"] for s in result.steps][-1] == "deleted pod default/load-1"


def test_a_node_step_that_fails_is_reported_and_the_run_goes_on(tmp_path: Path) -> None:
    api = FakeApi()
    t, _, result = timeline_on(tmp_path, "    - {at: 0s, restoreNode: {node: kfp-node-0003}}\n", api)
    t.run_due()
    assert result.steps[0]["did"] == ("step failed: ValueError: restoreNode kfp-node-0003: the run did not delete "
                                      "that node")
    assert not t.churning


def test_a_node_deleted_by_the_run_is_created_again_as_the_run_ends(tmp_path: Path) -> None:
    api = FakeApi()
    t, _, result = timeline_on(tmp_path, "    - {at: 0s, deleteNode: {node: kfp-node-0003}}\n", api)
    t.run_due()
    assert "kfp-node-0003" not in api.nodes and t.scheduler_settling(30.0)
    t.start()  # nothing left to do: the thread ends at once
    t.__exit__(None, None, None)
    assert "kfp-node-0003" in api.nodes
    assert [s["did"] for s in result.steps] == ["deleted node kfp-node-0003", "created node kfp-node-0003 again"]
