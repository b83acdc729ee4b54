"""A crash at a point in the rig: the killScheduler step and onEvent crash-point, the kill and restart, the
search trial's watch of the journal, and the report's picture."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from kube_fault_proxy.proxy.profiles.loader import ProfileError
from kube_fault_proxy.rig.actions import scheduler_kill
from kube_fault_proxy.rig.runs import report
from kube_fault_proxy.rig.runs.scenario import load_scenario

from tests.support.scenarios import timeline


def test_a_kill_at_the_crash_point(tmp_path: Path) -> None:
    s = load_scenario(timeline(tmp_path, "    - {at: 0s, activate: crash-at-bind-30}\n"
                                         "    - {onEvent: crash-point, killScheduler: {restartAfter: 1s}}\n"
                                         "    - {onEvent: scheduler-restarted, after: 5s, touchPods: true}\n"
                                         "    - {at: 2s, killScheduler: {restartAfter: 0s}}\n"))
    _, kill, touch, at_once = s.spec.timeline
    assert kill.onEvent == "crash-point" and kill.killScheduler is not None and kill.killScheduler.restartAfter == 1
    assert touch.onEvent == "scheduler-restarted" and at_once.killScheduler is not None
    assert at_once.killScheduler.restartAfter == 0


@pytest.mark.parametrize(("steps", "expected"), [
    ("    - {onEvent: crash-point, killScheduler: {restartAfter: 1s}, touchPods: true}\n",
     "a step needs exactly one of activate, deactivate, touchPods, killApiserver, killScheduler"),
    ("    - {onEvent: crash-point, killScheduler: {}}\n",
     "spec.timeline[0].killScheduler.restartAfter: required field is missing"),
    ("    - {onEvent: crash-point, killScheduler: {restartAfter: 11m}}\n",
     "spec.timeline[0].killScheduler.restartAfter: Input should be less than or equal to 600"),
    ("    - {onEvent: crash-point, killScheduler: {restartAfter: 1s, signal: TERM}}\n",
     "spec.timeline[0].killScheduler.signal: unknown field"),
    ("    - {onEvent: crash, killScheduler: {restartAfter: 1s}}\n",
     "spec.timeline[0].onEvent: Input should be 'outage-start', 'outage-end' or 'load-done'"),
], ids=["two-actions", "no-restart", "restart-too-late", "unknown-key", "unknown-event"])
def test_bad_kills_are_refused_naming_the_field(tmp_path: Path, steps: str, expected: str) -> None:
    with pytest.raises(ProfileError) as e:
        load_scenario(timeline(tmp_path, steps))
    assert any(expected in str(p) for p in e.value.problems), [str(p) for p in e.value.problems]


def fake_cluster(calls: list[str], monkeypatch: pytest.MonkeyPatch, new_pid: int = 222) -> Any:
    cluster = SimpleNamespace(scheduler="yunikorn", processes={}, yunikorn_url=None)

    def kill(c: Any) -> int:
        calls.append("kill")
        return 111

    def start(c: Any) -> float:
        calls.append("start")
        c.processes["yunikorn"] = SimpleNamespace(pid=new_pid)
        return 0.5

    monkeypatch.setattr(scheduler_kill, "kill_scheduler", kill)
    monkeypatch.setattr(scheduler_kill, "start_scheduler", start)
    return cluster


def test_the_kill_waits_restarts_and_records_both(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    cluster = fake_cluster(calls, monkeypatch)
    events: list[dict[str, Any]] = []
    stop = threading.Event()
    t = time.monotonic()
    did = scheduler_kill.kill_and_restart_scheduler(cluster, 0.2, lambda: 7.0, events, stop)
    assert time.monotonic() - t >= 0.19, "restarted restartAfter later"
    assert calls == ["kill", "start"]
    assert [(e["event"], e["pid"], e["t"]) for e in events] == [("scheduler-killed", 111, 7.0),
                                                                 ("scheduler-restarted", 222, 7.0)]
    assert events[1]["readySeconds"] == 0.5 and events[1]["downSeconds"] >= 0.19
    assert did.startswith("killed yunikorn (pid 111, kill -9); restarted it as pid 222")
    stop.set()  # the run has ended: the restart comes at once
    t = time.monotonic()
    scheduler_kill.kill_and_restart_scheduler(cluster, 60.0, lambda: 8.0, events, stop)
    assert time.monotonic() - t < 5
    with pytest.raises(ValueError, match="needs the local control plane"):
        scheduler_kill.kill_and_restart_scheduler(None, 1.0, lambda: 0.0, events, stop)


KILL = [{"component": "scheduler", "restartAfterSeconds": 0.3},
        {"component": "kube-controller-manager", "restartAfterSeconds": 0.1}]


@pytest.mark.parametrize(("record", "expected"), [
    (None, [("scheduler", 2.0)]),
    ({"event": "crash-point", "holdSeconds": 30}, [("scheduler", 2.0)]),
    ({"event": "crash-point", "kill": []}, [("scheduler", 2.0)]),
    ({"event": "crash-point", "kill": KILL}, [("scheduler", 0.3), ("kube-controller-manager", 0.1)]),
    ({"event": "crash-point", "kill": KILL[1:]}, [("kube-controller-manager", 0.1)]),
], ids=["no-record", "no-kill", "empty-kill", "both", "controller-manager-alone"])
def test_the_kill_plan_is_the_records_or_the_scheduler_alone(record: dict[str, Any] | None,
                                                             expected: list[tuple[str, float]]) -> None:
    assert [(k.component, k.restart_after) for k in scheduler_kill.kill_plan(record, 2.0)] == expected


@pytest.mark.parametrize("kill", [[{"component": "etcd", "restartAfterSeconds": 1}], KILL[:1] * 2],
                         ids=["unknown", "twice"])
def test_a_kill_plan_that_no_profile_could_give_is_refused(kill: list[dict[str, Any]]) -> None:
    with pytest.raises(ValueError, match="at most once"):
        scheduler_kill.kill_plan({"event": "crash-point", "kill": kill}, 1.0)


def with_controller_manager(calls: list[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    cluster = fake_cluster(calls, monkeypatch)

    def kill(c: Any) -> int:
        calls.append("kill kcm")
        return 333

    def start(c: Any) -> float:
        calls.append("start kcm")
        c.processes["kube-controller-manager"] = SimpleNamespace(pid=444)
        return 0.25

    monkeypatch.setattr(scheduler_kill, "kill_controller_manager", kill)
    monkeypatch.setattr(scheduler_kill, "start_controller_manager", start)
    return cluster


def test_a_correlated_crash_kills_both_at_once_and_restarts_each_after_its_own_delay(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    cluster = with_controller_manager(calls, monkeypatch)
    events: list[dict[str, Any]] = []
    clock = time.monotonic
    t0 = clock()
    plan = scheduler_kill.kill_plan({"kill": KILL}, 9.0)
    did = scheduler_kill.kill_and_restart_all(cluster, plan, lambda: round(clock() - t0, 1), events, threading.Event())
    assert calls == ["kill", "kill kcm", "start kcm", "start"], "both killed first; the shorter delay restarts first"
    assert [(e["event"], e["component"], e["pid"]) for e in events] == [
        ("scheduler-killed", "yunikorn", 111), ("controller-manager-killed", "kube-controller-manager", 333),
        ("controller-manager-restarted", "kube-controller-manager", 444), ("scheduler-restarted", "yunikorn", 222)]
    killed, restarted = {e["event"]: e for e in events}, {e["component"]: e["downSeconds"] for e in events[2:]}
    assert killed["scheduler-killed"]["t"] == killed["controller-manager-killed"]["t"] == 0.0
    assert 0.09 <= restarted["kube-controller-manager"] < 0.3 <= restarted["yunikorn"] < 2
    assert did.startswith("killed yunikorn (pid 111), kube-controller-manager (pid 333) at once (kill -9); "
                          "restarted kube-controller-manager as pid 444")
    assert "restarted yunikorn as pid 222" in did


def test_a_correlated_crash_restarts_at_once_when_the_run_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    cluster = with_controller_manager(calls, monkeypatch)
    stop = threading.Event()
    stop.set()
    t = time.monotonic()
    slow = [scheduler_kill.Kill("scheduler", 600.0), scheduler_kill.Kill("kube-controller-manager", 600.0)]
    scheduler_kill.kill_and_restart_all(cluster, slow, lambda: 0.0, [], stop)
    assert time.monotonic() - t < 5 and calls == ["kill", "kill kcm", "start", "start kcm"]
    with pytest.raises(ValueError, match="needs the local control plane"):
        scheduler_kill.kill_and_restart_all(None, slow, lambda: 0.0, [], stop)


def test_the_scheduler_alone_is_the_old_kill(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    cluster = with_controller_manager(calls, monkeypatch)
    events: list[dict[str, Any]] = []
    did = scheduler_kill.kill_and_restart_all(cluster, scheduler_kill.kill_plan(None, 0.0), lambda: 1.0, events,
                                              threading.Event())
    assert calls == ["kill", "start"] and did.startswith("killed yunikorn (pid 111, kill -9); restarted it as pid 222")
    assert [e["event"] for e in events] == ["scheduler-killed", "scheduler-restarted"]


class Journal:
    """The control client's journal paging, over records a test appends."""

    records: ClassVar[list[dict[str, Any]]] = []

    def __init__(self, url: str) -> None:
        pass

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def cursor(self) -> int:
        return len(self.records)

    def journal_after(self, since: int) -> Any:
        return SimpleNamespace(records=self.records[since:], next=len(self.records))


def test_the_watch_kills_and_restarts_on_each_crash_point_only(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    cluster = fake_cluster(calls, monkeypatch)
    Journal.records = [{"seq": 1, "event": "crash-point", "rule": "before-the-watch"}]
    monkeypatch.setattr(scheduler_kill, "ControlClient", Journal)
    events: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    with scheduler_kill.CrashPoints(cluster, "http://control", 0.0, lambda: 3.0, events, steps) as watch:
        Journal.records += [{"seq": 2, "event": "inject", "rule": "r"},
                            {"seq": 3, "event": "crash-point", "rule": "r", "upstreamStatus": 201,
                             "request": {"name": "p-7", "namespace": "ns"}}]
        deadline = time.monotonic() + 5
        while not steps and time.monotonic() < deadline:
            time.sleep(0.02)
        watch.idle()
    assert calls == ["kill", "start"], "one crash point after the watch began: one kill"
    assert [e["event"] for e in events] == ["crash-point", "scheduler-killed", "scheduler-restarted"]
    assert (events[0]["name"], events[0]["rule"], events[0]["upstreamStatus"]) == ("p-7", "r", 201)
    assert watch.pids == [(111, 222)]
    [step] = steps
    assert step["t"] == 3.0 and "kill -9" in step["did"]


def test_the_watch_kills_what_a_correlated_crash_point_names(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    cluster = with_controller_manager(calls, monkeypatch)
    Journal.records = []
    monkeypatch.setattr(scheduler_kill, "ControlClient", Journal)
    events: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    with scheduler_kill.CrashPoints(cluster, "http://control", 5.0, lambda: 3.0, events, steps) as watch:
        Journal.records += [{"seq": 1, "event": "crash-point", "rule": "r", "kill": KILL}]
        deadline = time.monotonic() + 5
        while not steps and time.monotonic() < deadline:
            time.sleep(0.02)
        watch.idle()
    assert calls == ["kill", "kill kcm", "start kcm", "start"]
    assert watch.pids == [(111, 222)], "the scheduler's pids, as before"
    assert [e["event"] for e in events] == ["crash-point", "scheduler-killed", "controller-manager-killed",
                                            "controller-manager-restarted", "scheduler-restarted"]


def test_the_timeline_shows_the_scheduler_killed() -> None:
    run = {"scenario": "s", "scheduler": "yunikorn", "seed": 1, "met": True, "seconds": 9.0,
           "load": {"requested": 10, "created": 10, "ratePerSecond": 10.0},
           "samples": [{"t": float(t), "pods": 10, "bound": t, "pending": 10 - t, "bindsSucceeded": t,
                        "bindsFailed": 0} for t in range(11)],
           "events": [{"t": 3.0, "event": "crash-point"}, {"t": 3.1, "event": "scheduler-killed"},
                      {"t": 5.0, "event": "scheduler-restarted"}],
           "steps": [], "check": {"verdict": "clean", "counts": {"pods": 10, "bound": 10}, "invariants": {}}}
    assert "scheduler killed" in report.timeline_svg(run)
    assert "controller manager killed" not in report.timeline_svg(run)
    run["events"] += [{"t": 2.0, "event": "controller-manager-killed"},
                      {"t": 6.0, "event": "controller-manager-restarted"}]
    assert "controller manager killed" in report.timeline_svg(run), "a correlated crash's second window"


def test_the_settle_waits_for_a_kill_still_to_come_at_a_time_or_a_bind_count_not_for_an_event() -> None:
    from kube_fault_proxy.rig.runs.scenario import Step
    from kube_fault_proxy.rig.runs.timeline import Timeline

    def settling(*steps: dict[str, Any], down: bool = False, restarted: float | None = None) -> bool:
        t = Timeline.__new__(Timeline)  # no thread, no control plane: only what the settle asks
        t.pending = [Step.model_validate(s) for s in steps]
        t.scheduler_down = down
        events = [] if restarted is None else [{"event": "scheduler-restarted", "t": restarted}]
        t.sampler = SimpleNamespace(events=events, t0=time.monotonic())  # type: ignore[assignment]
        return t.scheduler_settling(10.0)

    kill = {"killScheduler": {"restartAfter": "1s"}}
    assert settling({"afterBinds": 60, "after": "5s", **kill})  # every pod bound long before: still to come
    assert settling({"at": "8s", **kill})
    assert not settling({"onEvent": "crash-point", **kill})  # a crash point may never come: not waited for
    assert not settling({"at": "8s", "touchPods": True})
    assert not settling() and settling(down=True) and settling(restarted=0.0)


def test_the_settle_rule_after_a_restart_is_the_last_restart_plus_the_quiet_time() -> None:
    events = [{"t": 2.0, "event": "scheduler-killed"}, {"t": 5.0, "event": "scheduler-restarted"},
              {"t": 9.0, "event": "scheduler-restarted"}, {"t": 30.0, "event": "inject"}]
    assert scheduler_kill.restarted_within(events, 18.9, quiet=10)  # the last restart counts, not the first
    assert not scheduler_kill.restarted_within(events, 19.0, quiet=10)
    assert not scheduler_kill.restarted_within([{"t": 1.0, "event": "scheduler-killed"}], 1.5, quiet=10)  # no restart yet
