"""Invariants on recorded apiserver + YuniKorn payloads: each one passing and failing."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.rig.invariants.check import Report, Snapshot, evaluate, render
from kube_fault_proxy.rig.invariants.node_loss import NODE_LOSS
from kube_fault_proxy.rig.invariants.safety import SAFETY

DATA = Path(__file__).parent / "data"
NOW = 1796011400.0  # some minutes after both recordings
SAFE = dict.fromkeys(SAFETY, 0)  # every scheduler's safety invariants, judged in every report; these runs keep them
CHURN = dict.fromkeys(NODE_LOSS, 0)  # YuniKorn's books after node churn: no node went in these runs


def load(name: str) -> dict[str, Any]:
    return json.loads((DATA / f"yunikorn-{name}.json").read_text())


def snapshot(doc: dict[str, Any], yunikorn: bool = True) -> Snapshot:
    yk = {"queues": doc["queues"], "apps": doc["apps"], "cache": doc["cache"]} if yunikorn else None
    return Snapshot(doc["pods"], doc["nodes"], NOW, yk)


def by(report: Report) -> dict[str, int]:
    return {name: len(vs) for name, vs in report.by_invariant().items()}


def test_a_clean_yunikorn_run_is_clean() -> None:
    report = evaluate(snapshot(load("clean")), {"yunikorn"})
    assert report.ok, render(report)
    assert report.counts == {"pods": 30, "bound": 30, "pending": 0, "nodes": 5, "allocations": 30,
                             "phantomAllocations": 0}


def test_the_recorded_yunikorn_3355_run_violates_everything_it_should() -> None:
    report = evaluate(snapshot(load("3355")), {"yunikorn"})
    assert by(report) == {"stranded": 52, "missing-node": 0, **SAFE, "I1": 2, "I2": 51, "I3": 1, "I4": 52, "I5": 1,
                          **CHURN}
    assert report.counts["phantomAllocations"] == 51
    root, leaf = report.by_invariant()["I1"]  # root books every namespace's pods: the same surplus
    assert leaf.message == "queue root.default books 59 pods; 8 are bound in namespace default"
    assert root.message == "queue root books 59 pods; 8 are bound in all namespaces" and root.objects == ("root",)
    assert [v.invariant for v in evaluate(snapshot(load("3355")), {"yunikorn"}, namespace="default").violations
            if v.objects == ("root",)] == []  # one namespace judged: root, which books all of them, is not
    phantom = report.by_invariant()["I2"][0]
    assert phantom.message.startswith("phantom allocation: default/load-6e45ef40-")
    assert "is booked on kfp-node-" in phantom.message and phantom.message.endswith("but the pod is unbound (Pending)")
    assert report.as_dict()["verdict"] == "violations"


def pod(doc: dict[str, Any], i: int = 0) -> dict[str, Any]:
    return sorted(doc["pods"], key=lambda p: p["metadata"]["name"])[i]  # type: ignore[no-any-return]


def allocation_of(doc: dict[str, Any], p: dict[str, Any]) -> dict[str, Any]:
    return next(a for app in doc["apps"] for a in app["allocations"] if a["allocationKey"] == p["metadata"]["uid"])


def unbind(doc: dict[str, Any]) -> None:
    p = pod(doc)
    del p["spec"]["nodeName"]
    p["status"]["phase"] = "Pending"


def rebind(doc: dict[str, Any]) -> None:
    pod(doc)["spec"]["nodeName"] = "kfp-node-0001" if pod(doc)["spec"]["nodeName"] != "kfp-node-0001" else "kfp-node-0002"


def ghost_node(doc: dict[str, Any]) -> None:
    p = pod(doc)
    allocation_of(doc, p)["nodeId"] = "ghost"
    p["spec"]["nodeName"] = "ghost"
    doc["cache"]["pods"][f"default/{p['metadata']['name']}"]["nodeName"] = "ghost"


def delete_pod(doc: dict[str, Any]) -> None:
    doc["pods"].remove(pod(doc))


def book_one_more(doc: dict[str, Any]) -> None:
    doc["queues"]["children"][0]["allocatedResource"]["pods"] += 1
    doc["queues"]["allocatedResource"]["pods"] += 1  # a queue's usage is its parent's too (recursively)


def leak_in_root(doc: dict[str, Any]) -> None:
    """YUNIKORN-1993's leak: a placeholder's release skipped its queue (\"queue is nil\"), whose dynamic leaf was
    removed since: root alone keeps the pod."""
    doc["queues"]["allocatedResource"]["pods"] += 1


def ignored_pod(doc: dict[str, Any]) -> None:
    unbind(doc)
    p = pod(doc)
    doc["apps"][0]["allocations"].remove(allocation_of(doc, p))
    doc["queues"]["children"][0]["allocatedResource"]["pods"] -= 1
    doc["queues"]["allocatedResource"]["pods"] -= 1
    doc["cache"]["pods"][f"default/{p['metadata']['name']}"]["nodeName"] = ""


def stale_cache(doc: dict[str, Any]) -> None:
    doc["cache"]["pods"][f"default/{pod(doc)['metadata']['name']}"]["nodeName"] = "kfp-node-0009"


def assumed(doc: dict[str, Any]) -> None:
    doc["cache"]["statistics"]["assumed"] = 2


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        # root and root.default both book the unbound pod (I1 twice)
        (unbind, {"stranded": 1, "I1": 2, "I2": 1, "I4": 1}),
        (rebind, {"I2": 1, "I4": 1}),
        # the allocation is booked on the ghost node too: YuniKorn keeps it on a node that does not exist, and
        # its queue (and root) books a pod that holds no place on any node
        (ghost_node, {"missing-node": 1, "no-allocation-on-missing-node": 1, "I1": 2}),
        (delete_pod, {"I1": 2, "I2": 1}),
        (book_one_more, {"I1": 2}),
        (leak_in_root, {"I1": 1}),
        (ignored_pod, {"stranded": 1, "I3": 1}),
        (stale_cache, {"I4": 1}),
        (assumed, {"I5": 1}),
    ],
    ids=["unbound-pod", "other-node", "missing-node", "deleted-pod", "overbooked-queue", "leaked-in-root", "ignored-pod",
         "stale-shim-cache", "still-assumed"],
)
def test_each_invariant_fails_on_its_own_symptom(mutate: Callable[[dict[str, Any]], None],
                                                  expected: dict[str, int]) -> None:
    doc = copy.deepcopy(load("clean"))
    mutate(doc)
    got = {k: v for k, v in by(evaluate(snapshot(doc), {"yunikorn"})).items() if v}
    assert got == expected


@pytest.mark.parametrize(
    ("mutate", "kind"),
    [(unbind, "phantom"), (rebind, "wrong-node"), (delete_pod, "no-pod")],
    ids=["unbound-pod", "other-node", "deleted-pod"],
)
def test_a_phantom_is_told_apart_by_its_kind(mutate: Callable[[dict[str, Any]], None], kind: str) -> None:
    doc = copy.deepcopy(load("clean"))
    mutate(doc)
    report = evaluate(snapshot(doc), {"yunikorn"})
    [i2] = report.by_invariant()["I2"]
    assert i2.kind == kind and i2.as_dict()["kind"] == kind
    assert report.counts["phantomAllocations"] == (kind == "phantom")


def test_the_report_names_each_invariant_beside_its_key() -> None:
    invariants = evaluate(snapshot(load("3355")), {"yunikorn"}).as_dict()["invariants"]
    assert invariants["I2"] == {"holds": False, "name": "no-phantom-allocation",
                                "description": invariants["I2"]["description"], "violations": 51}
    assert invariants["stranded"]["name"] == "stranded"


def test_still_assumed_pods_are_named_when_the_dump_has_them() -> None:
    doc = copy.deepcopy(load("clean"))
    names = sorted(doc["cache"]["pods"])[:2]
    doc["cache"]["statistics"]["assumed"] = 2
    doc["cache"]["schedulingState"] = {names[0]: {"assumed": True}, names[1]: {"assumed": True},
                                       "default/gone": {"assumed": False}}
    (v,) = [v for v in evaluate(snapshot(doc), {"yunikorn"}).violations if v.invariant == "I5"]
    phase = next(p for p in doc["pods"] if f"default/{p['metadata']['name']}" == names[0])["status"]["phase"]
    assert v.objects == tuple(names)
    assert v.message.startswith(f"2 pods are still assumed by the shim although the cluster is idle: {names[0]} ({phase}), ")


def test_grace_period_and_room() -> None:
    doc = copy.deepcopy(load("clean"))
    unbind(doc)
    young = evaluate(snapshot(doc, yunikorn=False), {"yunikorn"}, grace=10_000)
    assert by(young)["stranded"] == 0
    for node in doc["nodes"]:
        node["status"]["allocatable"]["pods"] = "0"
    full = evaluate(snapshot(doc, yunikorn=False), {"yunikorn"}, grace=0)
    assert by(full)["stranded"] == 0  # no node has room: Pending is right


def test_a_stranded_pod_names_the_nodes_with_room_and_their_revisions() -> None:
    """The node-stranding excuse (excuses.py) reads which nodes had room, and whether each changed since an event."""
    doc = copy.deepcopy(load("clean"))
    unbind(doc)
    for i, node in enumerate(doc["nodes"]):
        node["metadata"]["resourceVersion"] = str(700 + i)
        if i:  # only the first node keeps room
            node["status"]["allocatable"]["pods"] = "0"
    snap = snapshot(doc, yunikorn=False)
    [v] = [v for v in evaluate(snap, {"yunikorn"}, grace=0).violations if v.invariant == "stranded"]
    first = doc["nodes"][0]["metadata"]["name"]
    assert v.room == {first: "700"} and v.numbers == {"checkedAt": snap.now}
    assert v.as_dict()["room"] == {first: "700"} and v.message.endswith("while 1 nodes have room")


def test_a_node_s_pod_capacity_in_thousands_is_read_as_a_quantity() -> None:
    """The apiserver writes 1000 pods as "1k" (a node brought up with --node-pods 1000): a quantity, not a float."""
    doc = copy.deepcopy(load("clean"))
    unbind(doc)
    for i, node in enumerate(doc["nodes"]):
        node["status"]["allocatable"]["pods"] = "1k" if i == 0 else "0"
    [v] = [v for v in evaluate(snapshot(doc, yunikorn=False), {"yunikorn"}, grace=0).violations
           if v.invariant == "stranded"]
    assert v.room == {doc["nodes"][0]["metadata"]["name"]: doc["nodes"][0]["metadata"].get("resourceVersion", "")}


def test_only_the_schedulers_own_pods_count() -> None:
    doc = copy.deepcopy(load("clean"))
    unbind(doc)
    assert by(evaluate(snapshot(doc, yunikorn=False), {"default-scheduler"}))["stranded"] == 0


def test_render_names_the_objects() -> None:
    text = render(evaluate(snapshot(load("3355")), {"yunikorn"}))
    assert re.search(r"^I2 no-phantom-allocation +NO ", text, re.M)  # the alias, the name beside it
    assert "default/load-6e45ef40-" in text and "(+" in text
    assert text.splitlines()[-1].startswith("159 violations (pods 60, bound 8")  # I1 twice: root.default and root


def test_a_namespace_scoped_check_judges_only_that_namespace() -> None:
    snap = snapshot(load("3355"))
    other = evaluate(snap, {"yunikorn"}, namespace="elsewhere")
    # This dump was cut to `statistics` and `pods`: its 59 assumed pods are not named, so no namespace is cleared.
    assert other.counts["pods"] == 0 and "I5" in other.checked and [v.invariant for v in other.violations] == ["I5"]
    assert "59 pods are still assumed by the shim and its dump names none" in other.violations[0].message
    here = by(evaluate(snap, {"yunikorn"}, namespace="default"))
    assert here == {"stranded": 52, "missing-node": 0, **SAFE, "I1": 1, "I2": 51, "I3": 1, "I4": 52, "I5": 1,
                    **CHURN}


def test_a_namespace_scoped_i5_counts_the_assumed_pods_the_dump_names_there() -> None:
    """I5 per namespace (a search trial's): the pods the shim's dump (`schedulingState`) marks assumed in it."""
    from kube_fault_proxy.rig.invariants.check import _nothing_left_assumed

    cache = {"statistics": {"assumed": 3}, "schedulingState": {
        "t1/load-a": {"assumed": True}, "t1/load-b": {"assumed": True}, "t2/load-c": {"assumed": True},
        "t1/load-d": {}}}
    [v] = _nothing_left_assumed(cache, {}, "t1")
    assert v.invariant == "I5" and v.message.startswith("2 pods are still assumed") and v.objects == ("t1/load-a",
                                                                                                   "t1/load-b")
    assert [x.objects for x in _nothing_left_assumed(cache, {}, "t2")] == [("t2/load-c",)]
    assert _nothing_left_assumed(cache, {}, "t3") == []
    assert _nothing_left_assumed({"statistics": {"assumed": 0}, "schedulingState": {}}, {}, "t1") == []
    [whole] = _nothing_left_assumed(cache, {})  # the whole cluster: the statistic
    assert whole.message.startswith("3 pods are still assumed") and len(whole.objects) == 3


def test_all_bound_ends_a_wait_early_only_when_the_work_is_done() -> None:
    from kube_fault_proxy.rig.invariants.check import all_bound

    assert all_bound("default")(snapshot(load("clean")))
    assert not all_bound("default")(snapshot(load("3355")))
    assert not all_bound("empty")(snapshot(load("clean")))  # nothing there yet: not done
    assert all_bound("default", "kube-fault-proxy/load")(snapshot(load("clean")))
