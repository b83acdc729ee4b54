"""Held-back bursts: the schema, the gated pods, and the wave's numbers from a run's samples."""

from __future__ import annotations

from pathlib import Path

import pytest
from kube_fault_proxy.proxy.profiles.loader import ProfileError
from kube_fault_proxy.rig.runs.scenario import load_scenario
from kube_fault_proxy.rig.workloads import load, wave

from tests.support.scenarios import scenario_file


@pytest.mark.parametrize("how", ["schedulingGates", "beforeScheduler"])
def test_a_load_is_held_back_either_way(tmp_path: Path, how: str) -> None:
    s = load_scenario(scenario_file(tmp_path, f"spec:\n  load: {{count: 10, holdBack: {how}}}\n"))
    assert s.spec.load.holdBack == how and s.spec.load.releaseConcurrency == 32
    assert load_scenario(scenario_file(tmp_path, "spec: {}\n")).spec.load.holdBack is None


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("spec:\n  load: {holdBack: gates}\n",
         "s.yaml:5:20: spec.load.holdBack: Input should be 'schedulingGates' or 'beforeScheduler'"),
        ("spec:\n  load: {releaseConcurrency: 8}\n",
         "spec.load: releaseConcurrency goes with holdBack schedulingGates"),
        ("spec:\n  load: {holdBack: beforeScheduler, releaseConcurrency: 8}\n",
         "spec.load: releaseConcurrency goes with holdBack schedulingGates"),
        ("spec:\n  load: {holdBack: schedulingGates, releaseConcurrency: 0}\n",
         "spec.load.releaseConcurrency: Input should be greater than or equal to 1"),
        ("spec:\n  timeline:\n    - {onEvent: wave-gone, touchPods: true}\n",
         "spec.timeline[0].onEvent: Input should be 'outage-start', 'outage-end' or 'load-done' (or, with holdBack"),
    ],
)
def test_bad_hold_backs_are_refused(tmp_path: Path, spec: str, expected: str) -> None:
    with pytest.raises(ProfileError) as e:
        load_scenario(scenario_file(tmp_path, spec))
    assert any(expected in str(p) for p in e.value.problems), [str(p) for p in e.value.problems]


def test_a_step_may_wait_for_the_wave(tmp_path: Path) -> None:
    s = load_scenario(scenario_file(tmp_path, "spec:\n  load: {holdBack: schedulingGates}\n  timeline:\n"
                                         "    - {onEvent: wave-released, after: 1s, touchPods: true}\n"))
    assert s.spec.timeline[0].onEvent == "wave-released"


def test_held_back_pods_carry_the_gate() -> None:
    spec = load.LoadSpec(scheduling_gates=(wave.GATE,))
    assert load.pod_manifest(spec, "p")["spec"]["schedulingGates"] == [{"name": "kube-fault-proxy/held-back"}]
    assert "schedulingGates" not in load.pod_manifest(load.LoadSpec(), "p")["spec"]


def samples(bound: list[int]) -> list[dict[str, int | float]]:
    return [{"t": float(t), "bound": b} for t, b in enumerate(bound)]


@pytest.mark.parametrize(
    ("bound", "released_at", "expected"),
    [
        # 100 pending at 2.5 s, all bound by 6 s: 100 in 3.5 s
        ([0, 0, 0, 20, 60, 90, 100, 100], 2.5, {"waveBound": 100, "boundSeconds": 3.5, "bindsPerSecond": 28.6}),
        # some bound before the release (a load not wholly held back): only the wave counts
        ([5, 5, 5, 55, 55], 1.0, {"waveBound": 50, "boundSeconds": 2.0, "bindsPerSecond": 25.0}),
        # nothing bound after it
        ([0, 0, 0], 0.5, {"waveBound": 0, "boundSeconds": 0.5, "bindsPerSecond": None}),
        # no sample after the release
        ([0, 0], 3.0, {"waveBound": 0, "boundSeconds": None, "bindsPerSecond": None}),
    ],
)
def test_the_waves_binds_per_second(bound: list[int], released_at: float, expected: dict[str, object]) -> None:
    release = {"holdBack": "schedulingGates", "t": released_at, "pending": 100, "releaseSeconds": 0.4}
    got = wave.summary(release, samples(bound))
    assert got == {**release, **expected}
