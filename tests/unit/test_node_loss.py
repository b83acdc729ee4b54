"""The node-loss invariants on a recorded YuniKorn run (yunikorn-clean.json) changed into each story node churn
tells: each break caught, the legal story clean."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.rig.invariants.check import Snapshot, evaluate, render
from kube_fault_proxy.rig.invariants.node_loss import NODE_LOSS

DATA = Path(__file__).parent / "data"
NOW = 1796011400.0
GONE = "kfp-node-0001"
DELETED_AT = NOW - 60


def recorded() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / "yunikorn-clean.json").read_text())
    # YuniKorn's node list as /ws/v1/partition/default/nodes gives it (the recording predates its fetch)
    doc["yknodes"] = [{"nodeID": n["metadata"]["name"], "schedulable": True, "foreignAllocations": []}
                      for n in doc["nodes"]]
    return doc


def snapshot(doc: dict[str, Any], lost: dict[str, float] | None = None) -> Snapshot:
    yk = {"queues": doc["queues"], "apps": doc["apps"], "cache": doc["cache"], "nodes": doc["yknodes"]}
    return Snapshot(doc["pods"], doc["nodes"], NOW, yk, lost=lost or {})


def broken(doc: dict[str, Any], lost: dict[str, float] | None = None) -> dict[str, int]:
    report = evaluate(snapshot(doc, lost), {"yunikorn"})
    return {k: len(v) for k, v in report.by_invariant().items() if v}


def pods_on(doc: dict[str, Any], node: str) -> list[dict[str, Any]]:
    return [p for p in doc["pods"] if p["spec"].get("nodeName") == node]


def forget(doc: dict[str, Any], pod: dict[str, Any]) -> None:
    """The pod gone from the apiserver, and from everything YuniKorn books (the legal end of a deletion)."""
    doc["pods"].remove(pod)
    for app in doc["apps"]:
        app["allocations"] = [a for a in app["allocations"] if a["allocationKey"] != pod["metadata"]["uid"]]
    doc["cache"]["pods"].pop(f"default/{pod['metadata']['name']}", None)
    doc["queues"]["children"][0]["allocatedResource"]["pods"] -= 1
    doc["queues"]["allocatedResource"]["pods"] -= 1  # a queue's usage is its parent's too (recursively)


def node_gone_cleanly(doc: dict[str, Any]) -> None:
    """The legal story: the node deleted, its pods deleted (PodGC), YuniKorn releases their allocations."""
    for p in pods_on(doc, GONE):
        forget(doc, p)
    doc["nodes"] = [n for n in doc["nodes"] if n["metadata"]["name"] != GONE]
    doc["yknodes"] = [n for n in doc["yknodes"] if n["nodeID"] != GONE]


def foreign(doc: dict[str, Any], phase: str, node: str = "kfp-node-0002") -> dict[str, Any]:
    """A pod placed by nodeName (not YuniKorn's), and the foreign allocation YuniKorn books for it."""
    pod = {"metadata": {"name": "foreign-0", "namespace": "default", "uid": "f0f0", "creationTimestamp":
                        "2026-11-30T04:00:00Z"},
           "spec": {"nodeName": node, "schedulerName": "kfp-foreign", "containers": []},
           "status": {"phase": phase}}
    doc["pods"].append(pod)
    alloc = {"allocationKey": "f0f0", "nodeId": node, "resource": {"vcore": 500},
             "allocationTags": {"kubernetes.io/meta/namespace": "default", "kubernetes.io/meta/podName": "foreign-0"}}
    next(n for n in doc["yknodes"] if n["nodeID"] == node)["foreignAllocations"].append(alloc)
    return pod


def test_the_recorded_run_is_clean_on_every_node_loss_invariant() -> None:
    report = evaluate(snapshot(recorded()), {"yunikorn"})
    assert set(NODE_LOSS) <= set(report.checked)
    assert report.ok, render(report)


def test_a_node_that_went_with_its_pods_is_clean() -> None:
    doc = recorded()
    node_gone_cleanly(doc)
    assert broken(doc, {GONE: DELETED_AT}) == {}


def test_an_allocation_left_on_a_deleted_node_is_caught() -> None:
    doc = recorded()
    node_gone_cleanly(doc)
    # one allocation stays on the node (YUNIKORN-3481: node removal raced the allocation), its pod unbound
    p = pods_on(recorded(), GONE)[0]
    stay = copy.deepcopy(p)
    del stay["spec"]["nodeName"]
    stay["status"]["phase"] = "Pending"
    doc["pods"].append(stay)
    doc["apps"][0]["allocations"].append(next(a for a in recorded()["apps"][0]["allocations"]
                                              if a["allocationKey"] == p["metadata"]["uid"]))
    doc["queues"]["children"][0]["allocatedResource"]["pods"] += 1
    doc["queues"]["allocatedResource"]["pods"] += 1
    report = evaluate(snapshot(doc, {GONE: DELETED_AT}), {"yunikorn"})
    [v] = report.by_invariant()["no-allocation-on-missing-node"]
    assert v.node == GONE and v.kind == "allocation"
    assert v.message == f"allocation default/{p['metadata']['name']} is booked on {GONE}, which does not exist"
    [r] = report.by_invariant()["assumed-pod-rescheduled"]
    assert r.kind == "allocation" and r.objects == (f"default/{p['metadata']['name']}",)


def test_a_foreign_allocation_on_a_deleted_node_is_caught() -> None:
    doc = recorded()
    foreign(doc, "Running", GONE)
    node_gone_cleanly(doc)
    doc["yknodes"].append({"nodeID": GONE, "foreignAllocations": [
        {"allocationKey": "f0f0", "nodeId": GONE, "allocationTags": {"kubernetes.io/meta/namespace": "default",
                                                                      "kubernetes.io/meta/podName": "foreign-0"}}]})
    got = broken(doc)
    assert got["no-allocation-on-missing-node"] == 1


@pytest.mark.parametrize(("phase", "expected"), [
    ("Running", {}),
    ("Pending", {}),
    ("Succeeded", {"no-foreign-allocation-for-terminated-pod": 1}),
    ("Failed", {"no-foreign-allocation-for-terminated-pod": 1}),
], ids=["running", "pending", "succeeded", "failed"])
def test_a_foreign_allocation_holds_only_while_its_pod_has_not_terminated(phase: str, expected: dict[str, int],
                                                                        ) -> None:
    doc = recorded()
    foreign(doc, phase)
    assert broken(doc) == expected


def test_a_foreign_allocation_for_a_pod_that_is_gone_is_caught() -> None:
    doc = recorded()
    pod = foreign(doc, "Running")
    doc["pods"].remove(pod)
    [v] = evaluate(snapshot(doc), {"yunikorn"}).by_invariant()["no-foreign-allocation-for-terminated-pod"]
    assert v.kind == "no-pod" and v.message == "foreign allocation default/foreign-0 on kfp-node-0002: the pod does " \
                                               "not exist"


def test_the_yunikorn_3381_story_is_caught() -> None:
    """A foreign pod terminated while its node was unknown; the node came back and the pod was adopted."""
    doc = recorded()
    foreign(doc, "Succeeded", GONE)
    report = evaluate(snapshot(doc, {GONE: DELETED_AT}), {"yunikorn"})
    [v] = report.by_invariant()["no-foreign-allocation-for-terminated-pod"]
    assert v.kind == "terminated" and v.node == GONE
    assert v.message == f"foreign allocation default/foreign-0 on {GONE}: the pod is Succeeded"


def assumed_on_lost_node(doc: dict[str, Any]) -> str:
    """YUNIKORN-3374's end state: a pod assumed on the node before it flapped, adopted when it came back,
    booked there, never bound."""
    p = pods_on(doc, GONE)[0]
    del p["spec"]["nodeName"]
    p["status"]["phase"] = "Pending"
    return f"default/{p['metadata']['name']}"


def test_the_yunikorn_3374_story_is_caught() -> None:
    doc = recorded()
    who = assumed_on_lost_node(doc)
    report = evaluate(snapshot(doc, {GONE: DELETED_AT}), {"yunikorn"})
    [v] = report.by_invariant()["assumed-pod-rescheduled"]
    assert v.objects == (who,) and v.node == GONE and v.kind == "allocation"
    assert v.message.startswith(f"{who} is Pending and unbound, but an allocation holds it on {GONE}, which the rig "
                                "deleted at ")
    assert report.by_invariant()["I2"][0].kind == "phantom"  # the phantom of YUNIKORN-3355, by another road


def test_a_pod_held_only_by_the_shim_cache_is_caught() -> None:
    doc = recorded()
    who = assumed_on_lost_node(doc)
    uid = next(p for p in doc["pods"] if f"default/{p['metadata']['name']}" == who)["metadata"]["uid"]
    for app in doc["apps"]:
        app["allocations"] = [a for a in app["allocations"] if a["allocationKey"] != uid]
    [v] = evaluate(snapshot(doc, {GONE: DELETED_AT}), {"yunikorn"}).by_invariant()["assumed-pod-rescheduled"]
    assert v.kind == "shim-cache"


@pytest.mark.parametrize("change", [
    lambda doc: None,  # the node flapped and every pod stayed bound: nothing to schedule again
    lambda doc: [p["spec"].update(nodeName="kfp-node-0002") for p in pods_on(doc, GONE)],
], ids=["bound-where-it-was", "moved"])
def test_without_a_pod_left_unbound_a_lost_node_breaks_nothing(change: Callable[[dict[str, Any]], Any]) -> None:
    doc = recorded()
    change(doc)
    got = broken(doc, {GONE: DELETED_AT})
    assert "assumed-pod-rescheduled" not in got and "no-allocation-on-missing-node" not in got


def test_a_node_the_rig_never_deleted_is_not_judged_by_assumed_pod_rescheduled() -> None:
    doc = recorded()
    assumed_on_lost_node(doc)
    assert "assumed-pod-rescheduled" not in broken(doc)  # I2 says it, without a story
    assert broken(doc)["I2"] == 1


def test_a_namespace_scoped_check_leaves_other_namespaces_out() -> None:
    doc = recorded()
    foreign(doc, "Succeeded")
    report = evaluate(snapshot(doc), {"yunikorn"}, namespace="elsewhere")
    assert not report.by_invariant()["no-foreign-allocation-for-terminated-pod"]
