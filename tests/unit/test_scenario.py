"""Scenario files: strict like profiles, and the shipped ones are valid."""

from __future__ import annotations

from pathlib import Path

import pytest
from kube_fault_proxy.proxy.profiles.loader import ProfileError
from kube_fault_proxy.rig.cluster.record import ClusterError
from kube_fault_proxy.rig.invariants.check import Report, Violation
from kube_fault_proxy.rig.runs import runner
from kube_fault_proxy.rig.runs.run_record import RunResult, Target
from kube_fault_proxy.rig.runs.runner import meets
from kube_fault_proxy.rig.runs.scenario import Expectation, load_scenario
from kube_fault_proxy.rig.workloads import load

ROOT = Path(__file__).resolve().parents[2]
HEAD = "apiVersion: kube-fault-proxy/v1\nkind: Scenario\nmetadata: {name: s}\n"


def test_shipped_scenarios_are_valid() -> None:
    files = sorted((ROOT / "scenarios").glob("*.yaml"))
    assert files
    for f in files:
        s = load_scenario(f)
        assert s.metadata.description.strip()
        assert s.spec.expect, f"{f} says nothing about what the run must show"


def test_the_founding_scenario() -> None:
    s = load_scenario(ROOT / "scenarios" / "yunikorn-3355.yaml")
    assert s.spec.timeline[0].activate == "apiserver-outage-after-200-binds"
    from kube_fault_proxy.proxy.profiles.library import load_dir

    outage = load_dir(ROOT / "fault_profiles")[str(s.spec.timeline[0].activate)].profile
    trigger = outage.spec.rules[0].when.trigger
    assert trigger is not None and trigger.answered and trigger.count == 200  # mid-wave: after 200 answered
    assert s.spec.expect["yunikorn"].verdict == "violations"
    assert s.spec.expect["kube-scheduler"].verdict == "clean"
    assert s.spec.schedulers() == ["kube-scheduler", "yunikorn"]  # a build's expectation counts for its scheduler
    assert s.spec.expectation("yunikorn", "no-such-patch") is None  # never the release's for a build


def test_the_seed_scale_scenario_is_the_seeds_workload() -> None:
    s = load_scenario(ROOT / "scenarios" / "yunikorn-3355-seed-scale.yaml")
    assert (s.spec.cluster.nodes, s.spec.load.count, s.spec.load.rate, s.spec.load.concurrency) == (500, 3000, 2000, 16)
    assert s.spec.load.namespace == "seed-scale"  # a namespace of its own: deleted after a run on a shared cluster
    # the seed's wave, made on any machine: the whole backlog is the scheduler's first list
    assert s.spec.load.holdBack == "beforeScheduler" and s.spec.timeline[0].activate == "apiserver-outage-after-200-binds"
    assert s.spec.expect["yunikorn+3355-forget-pod-reverts-with-expiry"].verdict == "clean"
    assert s.spec.expect["yunikorn"].invariants == ["stranded", "I1", "I2"]
    assert s.spec.expect["kube-scheduler"].verdict == "clean"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("spec:\n  timeline:\n    - {activate: p}\n", "s.yaml:6:7: spec.timeline[0]: a step needs exactly one of at, onEvent"),
        ("spec:\n  timeline:\n    - {at: 1s, activate: p, deactivate: true}\n",
         "spec.timeline[0]: a step needs exactly one of activate, deactivate, touchPods"),
        ("spec:\n  timeline:\n    - {onEvent: outage-begin, deactivate: true}\n",
         "s.yaml:6:17: spec.timeline[0].onEvent: Input should be 'outage-start', 'outage-end' or 'load-done'"),
        ("spec:\n  cluster: {scheduler: volcano}\n", "spec.cluster.scheduler: Input should be 'kube-scheduler' or 'yunikorn'"),
        ("spec:\n  load: {count: 0}\n", "spec.load.count: Input should be greater than or equal to 1"),
        ("spec:\n  expect: {yunikorn: {verdict: broken}}\n", "spec.expect.yunikorn.verdict: Input should be 'clean' or 'violations'"),
        ("spec:\n  expect: {yunikorn+fix: {verdict: violations, mayBreak: [I5]}}\n", "s.yaml:5:26: spec.expect.yunikorn+fix: mayBreak goes with verdict clean"),
        ("spec:\n  expect: {yunikron+fix: {verdict: clean}}\n", "spec.expect.yunikron+fix.[key]: String should match pattern"),
        ("spec:\n  settle: {quiet: 10}\n", "spec.settle.quiet: a duration needs a unit"),
        ("spec:\n  expect: {yunikorn: {verdict: violations, invariants: [I9]}}\n",
         "s.yaml:5:57: spec.expect.yunikorn.invariants[0]: unknown invariant 'I9' (known: stranded, missing-node, "),
        ("spec:\n  loads: {}\n", "s.yaml:5:3: spec.loads: unknown field"),
        ("spec:\n  load: {shape: gang-late}\n",
         "s.yaml:5:9: spec.load: gang-late is a search trial's shape (its node comes when the trial's load is in)"),
    ],
)
def test_errors_name_position_and_path(tmp_path: Path, spec: str, expected: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + spec)
    with pytest.raises(ProfileError) as e:
        load_scenario(path)
    assert any(expected in str(p) for p in e.value.problems), [str(p) for p in e.value.problems]


def test_expectations_name_invariants_by_name_or_alias(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + "spec:\n  expect:\n    yunikorn: {verdict: violations, invariants: "
                           "[stranded, no-phantom-allocation, I1]}\n"
                           "    kube-scheduler: {verdict: clean, mayBreak: [no-assumed-pod-left]}\n")
    s = load_scenario(path)
    assert s.spec.expect["yunikorn"].invariants == ["stranded", "I2", "I1"]  # as reports key them
    assert s.spec.expect["kube-scheduler"].mayBreak == ["I5"]
    assert meets(report("I2", "I1", "stranded"), s.spec.expect["yunikorn"])

def report(*invariants: str) -> Report:
    return Report(violations=[Violation(i, "x") for i in invariants], checked=["stranded", "I1", "I2", "I5"])


@pytest.mark.parametrize(
    ("expect", "rep", "met"),
    [
        (Expectation(verdict="clean"), report(), True),
        (Expectation(verdict="clean"), report("I2"), False),
        (Expectation(verdict="clean", mayBreak=["I5"]), report(), True),
        (Expectation(verdict="clean", mayBreak=["I5"]), report("I5"), True),
        (Expectation(verdict="clean", mayBreak=["I5"]), report("I5", "I2"), False),
        (Expectation(verdict="violations", invariants=["I1", "I2"]), report("I1", "I2", "stranded"), True),
        (Expectation(verdict="violations", invariants=["I1", "I2"]), report("I2"), False),
        (Expectation(verdict="violations"), report(), False),
        (None, report("I1"), None),
    ],
)
def test_expectations(expect: Expectation | None, rep: Report, met: bool | None) -> None:
    assert meets(rep, expect) is met


def test_a_touch_stops_once_the_run_has_ended() -> None:
    """At the seed's scale touching every pod can outlast the settle: the touch then stops and says
    how far it got, instead of failing under the cluster's teardown."""
    import threading
    from collections.abc import Iterator
    from contextlib import contextmanager
    from typing import Any

    from kube_fault_proxy.rig.runs.run_record import Target
    from kube_fault_proxy.rig.runs.scenario import Step
    from kube_fault_proxy.rig.runs.timeline import _perform

    stop = threading.Event()
    patched: list[str] = []

    class Api:
        def list(self, *a: Any, **k: Any) -> list[dict[str, Any]]:
            return [{"metadata": {"name": f"p{i}"}} for i in range(5)]

        def patch(self, kind: Any, name: str, *a: Any, **k: Any) -> None:
            patched.append(name)
            if len(patched) == 2:
                stop.set()  # the settle ends while the touch is under way

    class Kube:
        @contextmanager
        def client(self) -> Iterator[Api]:
            yield Api()

    target = Target(Kube(), "http://127.0.0.1:1")  # type: ignore[arg-type]
    step = Step(onEvent="outage-end", touchPods=True)
    assert _perform(step, target, 1, "ns", "run") == "touched 5 pods"  # no stop given: every pod
    patched.clear()
    stop.clear()
    assert _perform(step, target, 1, "ns", "run", stop) == "touched 2 of 5 pods (stopped: the run had ended)"
    assert patched == ["p0", "p1"]


def test_a_load_that_created_no_pod_ends_the_run_with_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(kube: object, spec: load.LoadSpec, progress: bool = True) -> load.LoadResult:
        return load.LoadResult("r1", spec.count, failed=spec.count, errors={"HTTP 403": spec.count})

    class Events:
        def __init__(self) -> None:
            self.events: list[dict[str, object]] = []
            self.t0 = 0.0

    monkeypatch.setattr(load, "create_pods", refused)
    result = RunResult("s", "yunikorn", 1, expected=None)
    ls = load.LoadSpec(count=3, namespace="yk")
    target = Target(object(), "http://127.0.0.1:1")  # type: ignore[arg-type]
    with pytest.raises(ClusterError, match=r"created none of its 3 pods in namespace yk \(3 HTTP 403\); a namespace"):
        runner._load(target, ls, result, Events(), say=False)  # type: ignore[arg-type]
    assert result.load["failed"] == 3  # what happened is kept for the report
