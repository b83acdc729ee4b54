"""The killApiserver step: its schema, what it records, and how the report shows it."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kube_fault_proxy.proxy.profiles.library import load_dir
from kube_fault_proxy.proxy.profiles.loader import ProfileError
from kube_fault_proxy.rig.actions import apiserver_kill
from kube_fault_proxy.rig.runs import report
from kube_fault_proxy.rig.runs.run_record import RunResult
from kube_fault_proxy.rig.runs.runner import bind_outcomes
from kube_fault_proxy.rig.runs.scenario import load_scenario

from tests.support.scenarios import timeline

ROOT = Path(__file__).resolve().parents[2]


def test_a_kill_at_a_time_or_after_binds(tmp_path: Path) -> None:
    s = load_scenario(timeline(tmp_path, "    - {at: 10s, killApiserver: {restartAfter: 10s}}\n"
                                         "    - {afterBinds: 200, after: 1s, killApiserver: {restartAfter: 500ms}}\n"
                                         "    - {onEvent: apiserver-restarted, after: 20s, touchPods: true}\n"))
    first, second, third = s.spec.timeline
    assert first.at == 10 and first.killApiserver is not None and first.killApiserver.restartAfter == 10
    assert second.afterBinds == 200 and second.after == 1 and second.killApiserver is not None
    assert second.killApiserver.restartAfter == 0.5 and third.onEvent == "apiserver-restarted"


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        ("    - {killApiserver: {restartAfter: 1s}}\n", "a step needs exactly one of at, onEvent, afterBinds"),
        ("    - {at: 1s, afterBinds: 5, killApiserver: {restartAfter: 1s}}\n",
         "a step needs exactly one of at, onEvent, afterBinds"),
        ("    - {at: 1s, killApiserver: {restartAfter: 1s}, touchPods: true}\n",
         "a step needs exactly one of activate, deactivate, touchPods, killApiserver"),
        ("    - {at: 1s, killApiserver: {}}\n", "spec.timeline[0].killApiserver.restartAfter: required field is missing"),
        ("    - {at: 1s, killApiserver: {restartAfter: 0s}}\n",
         "spec.timeline[0].killApiserver.restartAfter: Input should be greater than 0"),
        ("    - {at: 1s, killApiserver: {restartAfter: 1s, signal: TERM}}\n",
         "spec.timeline[0].killApiserver.signal: unknown field"),
        ("    - {afterBinds: 0, touchPods: true}\n", "spec.timeline[0].afterBinds: Input should be greater than or equal to 1"),
    ],
)
def test_bad_kills_are_refused(tmp_path: Path, steps: str, expected: str) -> None:
    with pytest.raises(ProfileError) as e:
        load_scenario(timeline(tmp_path, steps))
    assert any(expected in str(p) for p in e.value.problems), [str(p) for p in e.value.problems]


@pytest.mark.parametrize(("outage", "kill_name"), [("yunikorn-3355", "yunikorn-3355-kill"),
                                              ("yunikorn-3355-seed-scale", "yunikorn-3355-seed-scale-kill")])
def test_the_kill_variant_is_the_outage_workload_with_a_real_kill(outage: str, kill_name: str) -> None:
    founding = load_scenario(ROOT / "scenarios" / f"{outage}.yaml").spec
    kill = load_scenario(ROOT / "scenarios" / f"{kill_name}.yaml").spec
    assert kill.cluster == founding.cluster and kill.load == founding.load and kill.settle == founding.settle
    # the kill at the outage's own trigger: a marker rule with the outage rule's match and trigger, its injection
    # the step's event (read from the journal file)
    mark, step, touch = kill.timeline
    rules = {name: load_dir(ROOT / "fault_profiles")[name].profile.spec.rules[0]
             for name in (str(founding.timeline[0].activate), str(mark.activate))}
    outage_rule, mark_rule = rules.values()
    assert mark.at == 0 and (mark_rule.match, mark_rule.when) == (outage_rule.match, outage_rule.when)
    assert mark_rule.when.trigger is not None and mark_rule.when.trigger.count == 200 and mark_rule.when.trigger.answered
    assert mark_rule.when.maxInjections == 1 and mark_rule.fault.delay is not None  # a 1 ms hold, once
    assert step.onEvent == "inject" and step.killApiserver is not None and step.killApiserver.restartAfter == 10
    assert touch.onEvent == "apiserver-restarted" and touch.touchPods
    assert founding.timeline[1].onEvent == "outage-end" and touch.after == founding.timeline[1].after
    assert kill.expect and all(founding.expect[k] == v for k, v in kill.expect.items())  # the same verdicts asked


def test_the_step_kills_waits_restarts_and_records_both(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    fake_cluster = SimpleNamespace(processes={"kube-apiserver": SimpleNamespace(pid=222)})

    monkeypatch.setattr(apiserver_kill, "kill_apiserver", lambda c: calls.append("kill") or 111)
    monkeypatch.setattr(apiserver_kill, "start_apiserver", lambda c: calls.append("start") or 0.5)
    monkeypatch.setattr(apiserver_kill, "_binds", lambda control: calls.append("binds") or {
        "bindsSucceeded": 70, "bindsThrottled": 4, "bindsFailed": 2})
    events: list[dict[str, Any]] = []
    stop = threading.Event()
    stop.set()  # the run has ended: the restart comes at once, never later
    did = apiserver_kill.kill_and_restart(fake_cluster, "http://control", 30.0, 0.0, events, stop)  # type: ignore[arg-type]
    assert calls == ["kill", "binds", "start"]  # the kill first: the counters take seconds to read in a wave
    assert [e["event"] for e in events] == ["apiserver-killed", "apiserver-restarted"]
    assert events[0]["pid"] == 111 and events[0]["bindsSucceeded"] == 70 and events[1]["pid"] == 222
    assert events[0]["countersReadSeconds"] >= 0
    assert events[1]["downSeconds"] < 30 and "pid 111" in did and "pid 222" in did
    with pytest.raises(ValueError, match="needs the local control plane"):
        apiserver_kill.kill_and_restart(None, "http://control", 1.0, 0.0, events, stop)


def test_binds_before_the_kill_are_counted_as_before_an_outage() -> None:
    run = RunResult("s", "kube-scheduler", 1)
    run.samples = [{"t": 0.0, "bindsSucceeded": 0, "bindsThrottled": 1, "bindsFailed": 0},
                   {"t": 9.0, "bindsSucceeded": 90, "bindsThrottled": 8, "bindsFailed": 30}]
    run.events = [{"t": 2.0, "event": "apiserver-killed", "bindsSucceeded": 52, "bindsThrottled": 3, "bindsFailed": 0},
                  {"t": 6.0, "event": "apiserver-restarted"}]
    binds = bind_outcomes(run, {"counts": {"bound": 100}})
    assert binds["beforeOutage"] == {"succeeded": 52, "throttled": 2, "failed": 0}
    assert (binds["throttled"], binds["failed"], binds["committedWithoutAnswer"]) == (7, 30, 10)


def test_the_timeline_shows_the_kill_and_the_wave() -> None:
    run = {"scenario": "s", "scheduler": "kube-scheduler", "seed": 1, "met": True, "seconds": 9.0,
           "load": {"requested": 10, "created": 10, "ratePerSecond": 10.0},
           "samples": [{"t": float(t), "pods": 10, "bound": t, "pending": 10 - t, "bindsSucceeded": t,
                        "bindsFailed": 0} for t in range(11)],
           "events": [{"t": 1.0, "event": "wave-released", "pending": 10}, {"t": 3.0, "event": "apiserver-killed"},
                      {"t": 5.0, "event": "apiserver-restarted"}],
           "steps": [], "check": {"verdict": "clean", "counts": {"pods": 10, "bound": 10}, "invariants": {}},
           "wave": {"holdBack": "schedulingGates", "t": 1.0, "pending": 10, "releaseSeconds": 0.2, "releaseFailed": 0,
                    "waveBound": 10, "boundSeconds": 9.0, "bindsPerSecond": 1.1}}
    svg = report.timeline_svg(run)
    assert "apiserver killed" in svg and "wave released (10 pending)" in svg
    md = report.run_markdown(run, "TABLE")
    assert ("- wave (held back: schedulingGates): released at 1.0s with 10 pods pending (scheduling gates lifted "
            "in 0.2s); 10 bound in 9.0s: 1.1 binds/s") in md
