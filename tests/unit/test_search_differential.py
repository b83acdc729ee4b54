"""The differential oracle on hand-made end states: what clean runs agree on is judged, what they differ on is
masked, and a trial that ends elsewhere has diverged even where no invariant names it."""

from __future__ import annotations

from typing import Any

import pytest
from kube_fault_proxy.rig.search.differential import (
    ABSENT,
    Baseline,
    Divergence,
    distinct_end_states,
    pod_facts,
    workload_facts,
    yunikorn_facts,
)

NS = "s-t1-1"


def pod(name: str, node: str | None, phase: str = "Running", *conditions: tuple[str, str, str],
        owner: str | None = None, ns: str = NS) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-{name}"}
    if owner:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "uid": owner, "controller": True}]
    return {"metadata": meta, "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase, "conditions": [{"type": t, "status": s, "reason": r} for t, s, r in conditions]}}


def run(placement: list[str | None]) -> dict[str, Any]:
    """A clean run's end: pods p0.. placed as given (None: pending, Unschedulable), one pod of another namespace."""
    pods = [pod(f"p{i}", n, "Running" if n else "Pending",
                ("PodScheduled", "True", "") if n else ("PodScheduled", "False", "Unschedulable"))
            for i, n in enumerate(placement)]
    return pod_facts([*pods, pod("other", "n9", ns="kube-system")], NS)


def test_pod_facts_count_what_the_pods_are() -> None:
    facts = run(["n1", "n1", "n2", None])
    assert facts == {"pods": 4, "pods/bound": 3, "pods/pending": 1, "pods/phase/Running": 3, "pods/phase/Pending": 1,
                     "node/n1/pods": 2, "node/n2/pods": 1, "pods/condition/PodScheduled=True": 3,
                     "pods/condition/PodScheduled=False/Unschedulable": 1}


def test_what_clean_runs_differ_on_is_masked_and_the_rest_is_judged() -> None:
    baseline = Baseline.learn([run(["n1", "n2", None]), run(["n2", "n1", None]), run(["n1", "n1", None])])
    assert baseline.runs == 3
    assert {"node/n1/pods", "node/n2/pods"} <= baseline.masked  # placement varies with no fault
    assert baseline.stable["pods/bound"] == 2 and baseline.stable["pods/pending"] == 1
    assert baseline.diverged(run(["n2", "n2", None])) == []  # another placement: within the mask
    bad = baseline.diverged(run(["n1", None, None]))  # one pod fewer bound than every clean run
    assert [str(d) for d in bad] == [
        "pods/bound: 1 (every clean run: 2)",
        "pods/condition/PodScheduled=False/Unschedulable: 2 (every clean run: 1)",
        "pods/condition/PodScheduled=True: 1 (every clean run: 2)",
        "pods/pending: 2 (every clean run: 1)",
        "pods/phase/Pending: 2 (every clean run: 1)",
        "pods/phase/Running: 1 (every clean run: 2)"]


def test_a_fact_no_clean_run_had_is_a_divergence() -> None:
    baseline = Baseline.learn([run(["n1", None])] * 3)
    failed = pod_facts([pod("p0", "n1", "Failed"), pod("p1", None, "Pending",
                                                       ("PodScheduled", "False", "Unschedulable"))], NS)
    assert Divergence("pods/phase/Failed", ABSENT, 1) in baseline.diverged(failed)
    assert Divergence("pods/phase/Running", 1, ABSENT) in baseline.diverged(failed)


def test_a_baseline_needs_three_clean_runs() -> None:
    with pytest.raises(ValueError, match="at least 3 clean runs, not 2"):
        Baseline.learn([run(["n1"]), run(["n1"])])


def test_workload_facts_are_its_status_and_its_pods_by_state() -> None:
    rs = {"metadata": {"name": "rs", "uid": "rs-1"}, "status": {"replicas": 2, "readyReplicas": 2,
                                                               "conditions": [{"type": "ReplicaFailure",
                                                                               "status": "False"}]}}
    job = {"metadata": {"name": "batch", "uid": "job-1"}, "status": {"succeeded": 2,
                                                                    "conditions": [{"type": "Complete",
                                                                                    "status": "True"}]}}
    pods = [pod("a", "n1", owner="rs-1"), pod("b", "n2", owner="rs-1"), pod("c", "n1", "Succeeded", owner="job-1"),
            pod("d", "n1", "Succeeded", owner="job-1")]
    assert workload_facts([("ReplicaSet", rs), ("Job", job)], pods) == {
        "ReplicaSet/rs": True, "ReplicaSet/rs/status/replicas": 2, "ReplicaSet/rs/status/readyReplicas": 2,
        "ReplicaSet/rs/pods/live": 2, "Job/batch": True, "Job/batch/status/succeeded": 2,
        "Job/batch/condition/Complete": True, "Job/batch/pods/succeeded": 2}


def test_yunikorn_facts_are_its_books_for_the_trials_namespace() -> None:
    yk = {"queues": {"queuename": "root", "children": [
              {"queuename": f"root.{NS}", "isLeaf": True, "allocatedResource": {"pods": 3}},
              {"queuename": "root.other", "isLeaf": True, "allocatedResource": {"pods": 7}}]},
          "apps": [{"allocations": [{"allocationKey": "k1", "allocationTags": {"kubernetes.io/meta/namespace": NS}},
                                    {"allocationKey": "k2",
                                     "allocationTags": {"kubernetes.io/meta/namespace": "other"}}]}],
          "cache": {"statistics": {"assumed": 1, "podsAssigned": 3}}}
    assert yunikorn_facts(yk, NS) == {"yunikorn/allocations": 1, "yunikorn/queue/pods": 3,
                                      "yunikorn/cache/assumed": 1, "yunikorn/cache/podsAssigned": 3}
    assert yunikorn_facts(None, NS) == {}


def test_replays_under_other_event_orders_that_end_apart_are_told_apart() -> None:
    baseline = Baseline.learn([run(["n1", "n2"]), run(["n2", "n1"]), run(["n1", "n1"])])
    same = [run(["n1", "n2"]), run(["n2", "n2"]), run(["n1", "n1"])]  # placement only: masked
    assert len(distinct_end_states(same, baseline)) == 1
    apart = [*same, run(["n1", None])]
    assert len(distinct_end_states(apart, baseline)) == 2
