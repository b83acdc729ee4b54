"""Every invariant quotes the upstream promise it encodes, and the generated reference shows it; a Deployment's
ReplicaSets are judged against what its controller may have acted on, like a ReplicaSet's pods."""

from __future__ import annotations

import re

import pytest
from kube_fault_proxy.cli.reference.markdown import text
from kube_fault_proxy.cli.reference.models import scenario_page
from kube_fault_proxy.rig.controllers.promises import check_world, judge
from kube_fault_proxy.rig.controllers.world import World
from kube_fault_proxy.rig.invariants.catalogue import (
    CATALOGUE,
    CONDITION_INVARIANTS,
    CONTROLLER_INVARIANTS,
    FEATURE_INVARIANTS,
    KNOWN,
    STOP_INVARIANTS,
    Invariant,
    Promise,
)

from tests.unit.test_controller_promises import Story

EVERY = (*CATALOGUE, *CONTROLLER_INVARIANTS, *CONDITION_INVARIANTS, *FEATURE_INVARIANTS, *STOP_INVARIANTS)
FILE = re.compile(r"(kubernetes v1\.(37\.2|38\.0-beta\.0)|k8s\.io/(api|dynamic-resource-allocation) "
                  r"v0\.(37\.2|38\.0-beta\.0)|yunikorn-(core|k8shim) v1\.9\.0): "
                  r"[\w./-]+\.go, [A-Z]?\w+(\.\w+)?(, \w+(\.\w+)?)*")


def test_every_invariant_names_its_promise() -> None:
    assert {i.key for i in EVERY} == set(KNOWN)
    for i in EVERY:
        p = i.promise
        assert p.quote.strip() and all(f and f == f.strip() for f in p.fragments), i.name
        assert p.source.startswith("https://kubernetes.io/docs/") or FILE.fullmatch(p.source), (i.name, p.source)
        assert p.link.startswith(("https://kubernetes.io/docs/", "https://github.com/kubernetes/",
                                  "https://github.com/apache/yunikorn-")), (i.name, p.link)


def test_an_invariant_cannot_be_made_without_a_promise() -> None:
    with pytest.raises(TypeError, match="promise"):
        Invariant("never-anything", "nothing ever happens")  # type: ignore[call-arg]


@pytest.mark.parametrize(("quote", "source", "error"), [
    ("", "https://kubernetes.io/docs/x/", "a promise from 'https://kubernetes.io/docs/x/' has no quote"),
    ("   ", "https://kubernetes.io/docs/x/", "has no quote"),
    ("a quote", "the Job docs", "promise source 'the Job docs' is neither a link nor"),
    ("a quote", "kubernetes v1.36.3: pkg/controller/job/job_controller.go", "is neither a link nor"),
    ("a quote", "kubernetes: pkg/controller/job/job_controller.go, manageJob", "is neither a link nor"),
    ("a quote", "kubernetes v1.35.0: pkg/controller/job/job_controller.go, manageJob", "is neither a link nor"),
])
def test_a_promise_without_a_quote_or_a_named_source_is_refused(quote: str, source: str, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        Promise(quote, source)


def test_a_promise_links_to_the_source_at_the_version_the_rig_builds() -> None:
    p = Promise("Specifies the maximum desired number of pods the job should run at any given time. … More",
                "k8s.io/api v0.37.2: batch/v1/types.go, JobSpec.Parallelism")
    assert p.link == "https://github.com/kubernetes/api/blob/v0.37.2/batch/v1/types.go"
    assert p.fragments == ("Specifies the maximum desired number of pods the job should run at any given time.",
                           "More")
    shim = Promise("q", "yunikorn-k8shim v1.9.0: pkg/cache/task.go, Task.postTaskPending")
    assert shim.link == "https://github.com/apache/yunikorn-k8shim/blob/v1.9.0/pkg/cache/task.go"
    page = Promise("q", "https://kubernetes.io/docs/concepts/workloads/controllers/job/")
    assert page.link == page.source


def test_the_reference_shows_each_invariants_promise() -> None:
    page = scenario_page()
    for i in EVERY:
        [row] = [line for line in page.splitlines() if line.startswith(f"| `{i.name}` |")]
        assert text(f'"{i.promise.quote}"') in row and f"]({i.promise.link})" in row, i.name


def _deployment_race(settle_first: bool) -> Story:
    """A Deployment scaled 2 -> 6 -> 1 while its controller, having observed only generation 2, scales its
    ReplicaSet to 6 after generation 3 is written (legal: the controller decided on generation 2). With
    `settle_first`, the controller first reports observing generation 3 (replicas 1, maxSurge 1), and then the
    ReplicaSet is scaled to 3: a breach."""
    s = Story()
    dep = s.workload("Deployment", "d", {"replicas": 2, "strategy": {"rollingUpdate": {"maxSurge": 1}}})
    rs = s.workload("ReplicaSet", "d-1", {"replicas": 2}, dep)
    dep = s.set("Deployment", dep, "status", {"observedGeneration": 1})
    dep = s.set("Deployment", dep, "spec.replicas", 6)
    dep = s.set("Deployment", dep, "spec.replicas", 1)
    if settle_first:
        dep = s.set("Deployment", dep, "status", {"observedGeneration": 3})
        s.set("ReplicaSet", rs, "spec.replicas", 3)
        return s
    rs = s.set("ReplicaSet", rs, "spec.replicas", 6)  # decided on generation 2: replicas 6 + maxSurge 1
    dep = s.set("Deployment", dep, "status", {"observedGeneration": 2})
    s.set("ReplicaSet", rs, "spec.replicas", 1)
    s.set("Deployment", dep, "status", {"observedGeneration": 3})
    return s


def test_a_deployment_scaled_on_the_generation_its_controller_observed_is_clean() -> None:
    found = judge(_deployment_race(settle_first=False).history())
    assert [v for v in found if v.invariant == "replicaset-never-over-replicas"] == []


def test_a_deployment_scaled_past_what_it_observed_is_caught() -> None:
    [v] = [v for v in judge(_deployment_race(settle_first=True).history())
           if v.invariant == "replicaset-never-over-replicas"]
    assert v.kind == "deployment" and v.objects[0] == "w/d"
    assert v.numbers == {"asked": 3, "replicas": 1, "maxSurge": 1, "live": 0, "limit": 2, "observedGeneration": 3,
                         "generation": 3, "moments": 1}
    assert "Deployment w/d's ReplicaSets ask for 3 pods (d-1 3), over replicas 1 + maxSurge 1" in v.message


def test_a_snapshot_judges_a_deployment_only_once_its_controller_observed_it() -> None:
    s = Story()
    dep = s.workload("Deployment", "d", {"replicas": 1})  # maxSurge 25% of 1, rounded up: 1
    rs = s.workload("ReplicaSet", "d-1", {"replicas": 3}, dep)
    world = World()
    world.put("ReplicaSet", rs)
    world.put("Deployment", {**dep, "status": {"observedGeneration": 0}})
    assert check_world(world) == []  # the controller has not synced generation 1: it owes nothing yet
    world.put("Deployment", {**dep, "status": {"observedGeneration": 1}})
    [v] = check_world(world)
    assert v.invariant == "replicaset-never-over-replicas" and v.numbers["asked"] == 3
    assert "limit" not in v.numbers
