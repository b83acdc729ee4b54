"""A run's timeline (rig/runs/timeline.py), without a cluster: journal records as run events, steps that wait for the journal."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from kube_fault_proxy.rig.actions import scheduler_kill
from kube_fault_proxy.rig.runs import timeline as timeline_module
from kube_fault_proxy.rig.runs.scenario import load_scenario
from kube_fault_proxy.rig.runs.timeline import Timeline, journal_event

from tests.support.scenarios import timeline


def test_a_journal_record_is_placed_when_the_proxy_wrote_it_not_when_it_was_read() -> None:
    record = {"seq": 4, "time": 1020.06, "event": "outage-start", "bindsSucceeded": 395, "request": {"path": "/x"}}
    # the run began at wall-clock 1000.0; the sampler's read of the journal started 18.74 s in
    assert journal_event(record, 18.74, 1000.0) == {"t": 20.06, "seq": 4, "time": 1020.06, "event": "outage-start",
                                                    "bindsSucceeded": 395}
    assert journal_event({"event": "outage-end"}, 31.2, 1000.0) == {"t": 31.2, "event": "outage-end"}  # no time: read
    assert journal_event({"time": 999.5, "event": "activate"}, 0.1, 1000.0)["t"] == 0.0  # never before the run


def test_a_step_on_inject_is_due_when_the_proxy_wrote_the_injection_to_its_journal_file(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    journal.write_text(json.dumps({"seq": 1, "time": 1.0, "event": "proxy-start"}) + "\n")
    now = time.monotonic()
    sampler = SimpleNamespace(cursor=1, t0=now - 5.0, wall0=time.time() - 5.0)  # the run began 5 s ago
    target = SimpleNamespace(control="http://control", cluster=SimpleNamespace(journal=journal))
    scenario = load_scenario(timeline(tmp_path, "    - {onEvent: inject, killApiserver: {restartAfter: 10s}}\n"
                                                "    - {onEvent: crash-point, after: 2s, touchPods: true}\n"))
    kill, touch = scenario.spec.timeline
    t = Timeline(list(scenario.spec.timeline), target, 1, None, sampler, None, False)  # type: ignore[arg-type]
    assert not t.due(kill) and not t.due(touch)
    with journal.open("a") as f:  # written 3 s into the run (read 2 s later): due at once
        f.write(json.dumps({"seq": 2, "time": sampler.wall0 + 3.0, "event": "inject", "rule": "mark"}) + "\n")
        f.write(json.dumps({"seq": 3, "time": sampler.wall0 + 4.5, "event": "crash-point"}) + "\n")
    assert t.due(kill) and t.journal_seen["inject"] == pytest.approx(3.0, abs=0.01)
    assert not t.due(touch)  # its record 4.5 s in, plus 2 s
    time.sleep(1.6)
    assert t.due(touch)


def test_a_kill_on_a_correlated_crash_point_follows_its_records_plan(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    journal = tmp_path / "journal.jsonl"
    kill = [{"component": "scheduler", "restartAfterSeconds": 1.0},
            {"component": "kube-controller-manager", "restartAfterSeconds": 4.0}]
    sampler = SimpleNamespace(cursor=1, t0=time.monotonic() - 5.0, wall0=time.time() - 5.0, events=[])  # 5 s in
    journal.write_text(json.dumps({"seq": 1, "time": 1.0, "event": "proxy-start"}) + "\n")
    target = SimpleNamespace(control="http://control", cluster=SimpleNamespace(journal=journal))
    scenario = load_scenario(timeline(tmp_path, "    - {onEvent: crash-point, killScheduler: {restartAfter: 9s}}\n"
                                                "    - {at: 0s, killScheduler: {restartAfter: 2s}}\n"))
    plans: list[list[tuple[str, float]]] = []

    def performed(cluster: object, plan: list[scheduler_kill.Kill], *rest: object) -> str:
        plans.append([(k.component, k.restart_after) for k in plan])
        return "killed"

    monkeypatch.setattr(timeline_module, "kill_and_restart_all", performed)
    result = SimpleNamespace(steps=[])
    t = Timeline(list(scenario.spec.timeline), target, 1, None, sampler, result, False)  # type: ignore[arg-type]
    with journal.open("a") as f:  # the crash point, 1 s into the run
        f.write(json.dumps({"seq": 2, "time": sampler.wall0 + 1.0, "event": "crash-point", "kill": kill}) + "\n")
    t.run_due()
    assert plans == [[("scheduler", 1.0), ("kube-controller-manager", 4.0)], [("scheduler", 2.0)]], \
        "the record's plan on crash-point; the scheduler alone, after the step's delay, at a time"
