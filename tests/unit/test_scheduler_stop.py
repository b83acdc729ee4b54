"""A graceful stop in the rig: the stopScheduler step's schema, the signal and the timed exit on real processes,
the timeline that triggers it, and the invariant graceful-stop-within-bound judged on recorded events."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kube_fault_proxy.proxy.profiles.loader import ProfileError
from kube_fault_proxy.rig.actions import scheduler_stop
from kube_fault_proxy.rig.cluster import schedulers
from kube_fault_proxy.rig.cluster.processes import group_alive, spawn
from kube_fault_proxy.rig.cluster.record import ClusterError
from kube_fault_proxy.rig.invariants import check, graceful_stop
from kube_fault_proxy.rig.invariants.catalogue import lookup
from kube_fault_proxy.rig.runs import report, runner
from kube_fault_proxy.rig.runs import timeline as timeline_module
from kube_fault_proxy.rig.runs.run_record import RunResult
from kube_fault_proxy.rig.runs.scenario import Expectation, load_scenario
from kube_fault_proxy.rig.runs.timeline import Timeline, pending_counts

from tests.support.scenarios import scenario_file, timeline


def test_a_stop_step_reads_with_its_defaults_and_any_trigger(tmp_path: Path) -> None:
    s = load_scenario(timeline(tmp_path, "    - {at: 20s, stopScheduler: {within: 10s, restartAfter: 2s}}\n"
                                         "    - {afterBinds: 4, stopScheduler: {signal: INT, within: 30s, "
                                         "restartAfter: 0s}}\n"
                                         "    - {onEvent: scheduler-restarted, after: 5s, "
                                         "stopScheduler: {within: 1m, restartAfter: 1s}}\n"
                                         "    - {onEvent: scheduler-stopped, touchPods: true}\n"))
    at, binds, on_event, after_stop = s.spec.timeline
    assert at.stopScheduler is not None and at.actions() == ["stopScheduler"]
    assert (at.stopScheduler.signal, at.stopScheduler.within, at.stopScheduler.restartAfter) == ("TERM", 10.0, 2.0)
    assert binds.stopScheduler is not None and binds.stopScheduler.signal == "INT" and binds.afterBinds == 4
    assert on_event.stopScheduler is not None and on_event.stopScheduler.within == 60.0
    assert after_stop.onEvent == "scheduler-stopped"


@pytest.mark.parametrize(("steps", "expected"), [
    ("    - {at: 1s, stopScheduler: {restartAfter: 1s}}\n",
     "spec.timeline[0].stopScheduler.within: required field is missing"),
    ("    - {at: 1s, stopScheduler: {within: 10s}}\n",
     "spec.timeline[0].stopScheduler.restartAfter: required field is missing"),
    ("    - {at: 1s, stopScheduler: {signal: KILL, within: 10s, restartAfter: 1s}}\n",
     "spec.timeline[0].stopScheduler.signal: Input should be 'TERM' or 'INT'"),
    ("    - {at: 1s, stopScheduler: {within: 4s, restartAfter: 1s}}\n",
     "spec.timeline[0].stopScheduler.within: Input should be greater than or equal to 5"),
    ("    - {at: 1s, stopScheduler: {within: 10, restartAfter: 1s}}\n",
     "spec.timeline[0].stopScheduler.within: a duration needs a unit"),
    ("    - {at: 1s, stopScheduler: {within: 11m, restartAfter: 1s}}\n",
     "spec.timeline[0].stopScheduler.within: Input should be less than or equal to 600"),
    ("    - {at: 1s, stopScheduler: {within: 10s, restartAfter: 1s, grace: 3s}}\n",
     "spec.timeline[0].stopScheduler.grace: unknown field"),
    ("    - {at: 1s, stopScheduler: {within: 10s, restartAfter: 1s}, killScheduler: {restartAfter: 1s}}\n",
     "a step needs exactly one of activate"),
    ("    - {onEvent: scheduler-gone, stopScheduler: {within: 10s, restartAfter: 1s}}\n",
     "spec.timeline[0].onEvent: Input should be 'outage-start', 'outage-end' or 'load-done'"),
], ids=["no-within", "no-restart", "kill-signal", "under-the-promise", "no-unit", "too-long", "unknown-key",
        "two-actions", "unknown-event"])
def test_bad_stops_are_refused_naming_the_field(tmp_path: Path, steps: str, expected: str) -> None:
    with pytest.raises(ProfileError) as e:
        load_scenario(timeline(tmp_path, steps))
    problems = [str(p) for p in e.value.problems]
    assert any(expected in p for p in problems), problems
    assert all(p.startswith(f"{tmp_path / 's.yaml'}:") for p in problems), "file:line:col first"


def test_a_bound_under_the_schedulers_promise_is_refused_before_the_run(tmp_path: Path) -> None:
    s = load_scenario(scenario_file(tmp_path, "spec:\n  timeline:\n"
                                              "    - {at: 1s, stopScheduler: {within: 10s, restartAfter: 1s}}\n"
                                              "    - {at: 9s, stopScheduler: {within: 40s, restartAfter: 1s}}\n"))
    assert runner.stop_steps(s, "yunikorn") == 2
    with pytest.raises(ValueError, match=r"stopScheduler within 10s is stronger than kube-scheduler promises "
                                         r"\(its only cited promise is a pod's default "
                                         r"terminationGracePeriodSeconds, 30 s\): give kube-scheduler at least 30s"):
        runner.stop_steps(s, "kube-scheduler")
    graceful_stop.check_bounds([30.0, 45.0], "kube-scheduler")  # at the promise: judged
    with pytest.raises(ValueError, match="YuniKorn's shim alone may wait 5 s"):
        graceful_stop.check_bounds([4.0], "yunikorn")


def stop_event(t: float, **fields: Any) -> dict[str, Any]:
    return {"t": t, "event": "scheduler-stopped", "scheduler": "yunikorn", "pid": 41, "signal": "TERM",
            "within": 10.0, **fields}


def test_a_stop_within_its_bound_holds_and_one_over_it_or_killed_at_it_breaks() -> None:
    within = [stop_event(20.0, exitSeconds=0.42, exitCode=0), {"t": 22.0, "event": "scheduler-restarted"}]
    assert graceful_stop.judge_stops(within, 1) == []
    assert graceful_stop.judge_stops([stop_event(20.0, exitSeconds=10.0, exitCode=0)], 1) == [], "at the bound"
    late, killed = graceful_stop.judge_stops([stop_event(20.0, exitSeconds=12.5, exitCode=0),
                                              stop_event(50.0, stopTimedOut=True, exitCode=None)], 2)
    assert (late.invariant, late.kind, late.numbers) == ("graceful-stop-within-bound", "late",
                                                         {"within": 10.0, "exitSeconds": 12.5})
    assert late.message == "yunikorn (pid 41) exited 12.50s after SIGTERM at 20.0s (bound 10s)"
    assert (killed.kind, killed.message) == ("timed-out", "yunikorn (pid 41) still ran 10s after SIGTERM at 50.0s "
                                                          "and was killed")


def test_a_stop_step_that_made_no_stop_is_not_taken_as_held() -> None:
    [unmade] = graceful_stop.judge_stops([{"t": 1.0, "event": "scheduler-killed"}], 1)
    assert (unmade.kind, unmade.numbers) == ("not-made", {"steps": 1, "stops": 0})
    assert graceful_stop.judge_stops([], 0) == []


def judged(events: list[dict[str, Any]], stops: int, expect: Expectation | None) -> RunResult:
    result = RunResult("s", "yunikorn", 1)
    sampler = SimpleNamespace(samples=[], events=events, latency_first=None, latency_last=None)
    runner._judge(result, check.Snapshot([], [], time.time()), True, expect, sampler, 30.0,  # type: ignore[arg-type]
                  stops)
    return result


def test_a_run_with_stop_steps_is_judged_on_its_stops_and_meets_its_expectation_by_them() -> None:
    clean, violations = Expectation(verdict="clean"), Expectation(verdict="violations",
                                                                  invariants=["graceful-stop-within-bound"])
    good = judged([stop_event(20.0, exitSeconds=0.4, exitCode=0)], 1, clean)
    assert good.check["invariants"]["graceful-stop-within-bound"] == {
        "holds": True, "name": "graceful-stop-within-bound", "violations": 0,
        "description": lookup("graceful-stop-within-bound").meaning}
    assert good.met is True
    bad = judged([stop_event(20.0, stopTimedOut=True, exitCode=None)], 1, clean)
    assert bad.check["verdict"] == "violations" and bad.met is False
    assert "graceful-stop-within-bound NO" in " ".join(bad.table.split())
    assert judged([stop_event(20.0, stopTimedOut=True, exitCode=None)], 1, violations).met is True
    assert "graceful-stop-within-bound" not in judged([], 0, clean).check["invariants"], "no stop step: not judged"


def fake_cluster(tmp_path: Path, scheduler: str, pid: int) -> Any:
    state = SimpleNamespace(scheduler=scheduler, processes={scheduler: SimpleNamespace(pid=pid)})
    return SimpleNamespace(state=state, dir=tmp_path, save=lambda: None)


# A stand-in scheduler: says it is ready once its handler is set, then on SIGTERM waits `delay` and exits `code`
# (or, with code -1, ignores SIGTERM).
STANDIN = """
import signal, sys, time
delay, code = float(sys.argv[1]), int(sys.argv[2])
def stop(*_):
    time.sleep(delay)
    sys.exit(code)
signal.signal(signal.SIGTERM, signal.SIG_IGN if code < 0 else stop)
signal.signal(signal.SIGINT, signal.SIG_IGN if code < 0 else stop)
print("ready", flush=True)
time.sleep(60)
"""


def standin(tmp_path: Path, delay: float, code: int) -> int:
    log = tmp_path / f"standin-{delay}-{code}.log"
    pid = spawn([sys.executable, "-c", STANDIN, str(delay), str(code)], log)
    deadline = time.monotonic() + 10
    while "ready" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "the stand-in never got ready"
        time.sleep(0.02)
    return pid


@pytest.mark.parametrize(("sig", "delay", "code"), [("TERM", 0.3, 0), ("INT", 0.0, 3)], ids=["term-0", "int-3"])
def test_a_scheduler_that_exits_is_timed_from_the_signal_with_its_exit_code(tmp_path: Path, sig: str, delay: float,
                                                                            code: int) -> None:
    pid = standin(tmp_path, delay, code)
    c = fake_cluster(tmp_path, "kube-scheduler", pid)
    done = schedulers.signal_scheduler(c, sig, within=5.0)
    assert not done.timed_out and done.exit_code == code and done.pid == pid
    assert done.exit_seconds is not None and delay <= done.exit_seconds < delay + 2.0
    assert not group_alive(pid) and "kube-scheduler" not in c.state.processes


def test_a_scheduler_that_outlives_its_bound_is_killed_with_its_group(tmp_path: Path) -> None:
    pid = standin(tmp_path, 0.0, -1)
    c = fake_cluster(tmp_path, "kube-scheduler", pid)
    t = time.monotonic()
    done = schedulers.signal_scheduler(c, "TERM", within=0.5)
    assert done.timed_out and done.exit_code is None and done.exit_seconds is None
    assert 0.5 <= time.monotonic() - t < 5.0
    assert not group_alive(pid), "nothing is left"
    with pytest.raises(ClusterError, match="no scheduler to stop"):
        schedulers.signal_scheduler(c, "TERM", within=0.5)


def test_the_stop_records_its_exit_and_what_was_counted_then_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    cluster = SimpleNamespace(scheduler="yunikorn", processes={}, yunikorn_url=None)

    def signalled(c: Any, sig: str, within: float) -> schedulers.GracefulStop:
        calls.append(f"SIG{sig} within {within:g}")
        return schedulers.GracefulStop(111, 0.731, 0)

    def restarted(c: Any, since: float, now: Any, events: list[dict[str, Any]]) -> tuple[int, float, float]:
        calls.append("start")
        events.append({"t": now(), "event": "scheduler-restarted", "pid": 222})
        return 222, 0.5, time.monotonic() - since

    monkeypatch.setattr(scheduler_stop, "signal_scheduler", signalled)
    monkeypatch.setattr(scheduler_stop, "restart_recorded", restarted)
    events: list[dict[str, Any]] = []
    t = time.monotonic()
    did = scheduler_stop.stop_and_restart_scheduler(cluster, "TERM", 10.0, 0.2, lambda: 20.0, events,  # type: ignore[arg-type]
                                                    threading.Event(), {"pendingPods": 3, "pendingWithCondition": 0})
    assert time.monotonic() - t >= 0.19, "restarted restartAfter later"
    assert calls == ["SIGTERM within 10", "start"]
    stopped = {k: v for k, v in events[0].items() if k != "time"}
    assert stopped == {"t": 20.0, "event": "scheduler-stopped", "scheduler": "yunikorn", "pid": 111, "signal": "TERM",
                       "within": 10.0, "exitSeconds": 0.731, "exitCode": 0, "pendingPods": 3,
                       "pendingWithCondition": 0}
    assert did.startswith("stopped yunikorn (pid 111): exited 0.73s after SIGTERM (bound 10s), exit code 0; "
                          "restarted it as pid 222")
    monkeypatch.setattr(scheduler_stop, "signal_scheduler", lambda c, s, w: schedulers.GracefulStop(111, None, None))
    did = scheduler_stop.stop_and_restart_scheduler(cluster, "INT", 5.0, 0.0, lambda: 30.0, events,  # type: ignore[arg-type]
                                                    threading.Event())
    assert events[2]["stopTimedOut"] is True and "exitSeconds" not in events[2] and events[2]["signal"] == "INT"
    assert "still running 5s after SIGINT, killed (kill -9)" in did
    with pytest.raises(ValueError, match="needs the local control plane"):
        scheduler_stop.stop_and_restart_scheduler(None, "TERM", 10.0, 0.0, lambda: 0.0, events, threading.Event())


def pod(name: str, node: str | None, phase: str, scheduled: str | None) -> dict[str, Any]:
    conditions = [] if scheduled is None else [{"type": "PodScheduled", "status": scheduled}]
    return {"metadata": {"name": name}, "spec": {"nodeName": node} if node else {},
            "status": {"phase": phase, "conditions": conditions}}


def test_the_pending_pods_and_those_told_why_are_counted() -> None:
    pods = [pod("a", "n1", "Running", "True"), pod("b", None, "Pending", "False"), pod("c", None, "Pending", None),
            pod("d", None, "Pending", "False"), pod("e", None, "Failed", "False")]
    assert pending_counts(pods) == {"pendingPods": 3, "pendingWithCondition": 2}


def test_the_timeline_stops_the_scheduler_at_a_time_after_binds_and_on_an_event(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journal = tmp_path / "journal.jsonl"
    journal.write_text(json.dumps({"seq": 1, "time": 1.0, "event": "proxy-start"}) + "\n")
    sampler = SimpleNamespace(cursor=1, t0=time.monotonic() - 5.0, wall0=time.time() - 5.0, events=[],
                              seen=lambda e: next((x["t"] for x in sampler.events if x["event"] == e), None))
    target = SimpleNamespace(control="http://control", cluster=SimpleNamespace(journal=journal))
    scenario = load_scenario(timeline(tmp_path, "    - {at: 0s, stopScheduler: {within: 10s, restartAfter: 2s}}\n"
                                                "    - {afterBinds: 3, stopScheduler: {signal: INT, within: 7s, "
                                                "restartAfter: 0s}}\n"
                                                "    - {onEvent: scheduler-killed, stopScheduler: {within: 30s, "
                                                "restartAfter: 1s}}\n"))
    stops: list[tuple[str, float, float, dict[str, int]]] = []

    def performed(cluster: object, sig: str, within: float, restart_after: float, now: Any,
                  events: list[dict[str, Any]], stop: threading.Event, seen: dict[str, int]) -> str:
        stops.append((sig, within, restart_after, seen))
        return "stopped"

    monkeypatch.setattr(timeline_module, "stop_and_restart_scheduler", performed)
    monkeypatch.setattr(Timeline, "pending_conditions", lambda self: {"pendingPods": 1})
    binds = [0]
    monkeypatch.setattr(Timeline, "_binds", lambda self: binds[0])
    result = SimpleNamespace(steps=[])
    t = Timeline(list(scenario.spec.timeline), target, 1, None, sampler, result, False)  # type: ignore[arg-type]
    assert t.scheduler_settling(10.0), "a stop still to come at a time or a bind count is waited for"
    t.run_due()
    assert stops == [("TERM", 10.0, 2.0, {"pendingPods": 1})], "at 0 s: at once; the others not yet"
    binds[0] = 3
    t.run_due()
    assert stops[1:] == [("INT", 7.0, 0.0, {"pendingPods": 1})]
    assert not t.scheduler_settling(10.0), "one on an event that may never come is not waited for"
    sampler.events.append({"t": 4.0, "event": "scheduler-killed"})
    t.run_due()
    assert stops[2:] == [("TERM", 30.0, 1.0, {"pendingPods": 1})] and t.pending == []
    assert [s["did"] for s in result.steps] == ["stopped"] * 3
    assert not t.killing and not t.scheduler_down


def test_the_timeline_svg_shows_the_scheduler_stopped() -> None:
    run = {"scenario": "s", "scheduler": "yunikorn", "seed": 1, "met": True, "seconds": 9.0,
           "load": {"requested": 10, "created": 10, "ratePerSecond": 10.0},
           "samples": [{"t": float(t), "pods": 10, "bound": t, "pending": 10 - t, "bindsSucceeded": t,
                        "bindsFailed": 0} for t in range(11)],
           "events": [{"t": 3.0, "event": "scheduler-restarted"}], "steps": [],
           "check": {"verdict": "clean", "counts": {"pods": 10, "bound": 10}, "invariants": {}}}
    assert "scheduler stopped" not in report.timeline_svg(run)
    run["events"] = [stop_event(3.1, exitSeconds=0.4), {"t": 5.0, "event": "scheduler-restarted"}]
    assert "scheduler stopped" in report.timeline_svg(run) and "scheduler killed" not in report.timeline_svg(run)

