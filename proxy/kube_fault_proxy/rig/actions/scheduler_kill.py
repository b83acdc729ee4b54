"""A crash at a point: `kill -9` the scheduler under test and start it again, from what the cluster holds.

A scenario does it as a step (`killScheduler`, usually `onEvent: crash-point`); a search trial whose
profile has a crashPoint rule does it on every `crash-point` record the proxy journals (`CrashPoints`).
A crashPoint rule with `kill` makes it correlated: its record names the components (the scheduler,
kube-controller-manager), all killed at once, each started again after its own delay (`kill_plan`,
`kill_and_restart_all`)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from kube_fault_proxy.proxy.control.client import ControlClient, ControlError
from kube_fault_proxy.proxy.faults.crash_point import COMPONENTS
from kube_fault_proxy.rig.cluster.controller_manager import kill_controller_manager, start_controller_manager
from kube_fault_proxy.rig.cluster.record import Cluster, ClusterError
from kube_fault_proxy.rig.cluster.schedulers import kill_scheduler, start_scheduler

POLL_SECONDS = 0.1  # how often the journal is read for a crash point: the scheduler dies this soon after


def kill_and_restart_scheduler(cluster: Cluster | None, restart_after: float, now: Callable[[], float],
                               events: list[dict[str, Any]], stop: threading.Event) -> str:
    """SIGKILL the scheduler's process group, wait `restart_after` (less if the run ends: it must never stay
    down), start the same build again and wait until it is ready. `scheduler-killed` and
    `scheduler-restarted` (pids, seconds) go into the run's events, at `now()`; returns what it did."""
    if cluster is None:
        raise ValueError("killScheduler needs the local control plane (scenario run without --kubeconfig)")
    scheduler = cluster.scheduler
    pid = kill_scheduler(cluster)
    killed = time.monotonic()
    events.append({"t": round(now(), 2), "event": "scheduler-killed", "scheduler": scheduler, "pid": pid,
                   "time": time.time()})
    stop.wait(restart_after)
    new_pid, ready, down = restart_recorded(cluster, killed, now, events)
    return (f"killed {scheduler} (pid {pid}, kill -9); restarted it as pid {new_pid}, "
            f"ready {ready:.1f}s later, down {down:.1f}s")


def restart_recorded(cluster: Cluster, since: float, now: Callable[[], float],
                     events: list[dict[str, Any]]) -> tuple[int, float, float]:
    """Start the scheduler again (after a kill or a graceful stop at monotonic `since`) and wait until it is ready
    (YuniKorn: until its REST API lists the partition's applications); `scheduler-restarted` goes into the events.
    Returns its new pid, the seconds to ready, and the seconds it was down."""
    ready = start_scheduler(cluster)
    if cluster.yunikorn_url is not None:
        ready += _partition_answers(cluster.yunikorn_url)
    new_pid = cluster.processes[cluster.scheduler].pid
    down = time.monotonic() - since
    events.append({"t": round(now(), 2), "event": "scheduler-restarted", "scheduler": cluster.scheduler,
                   "pid": new_pid, "time": time.time(), "readySeconds": round(ready, 2), "downSeconds": round(down, 2)})
    return new_pid, ready, down


@dataclass(frozen=True)
class Kill:
    """One component of a crash: `scheduler` (the scheduler under test) or `kube-controller-manager`, and how long
    after the kill it starts again."""

    component: str
    restart_after: float


def kill_plan(record: Mapping[str, Any] | None, restart_after: float) -> list[Kill]:
    """What a crash point kills: the components its `crash-point` record names (`kill`, from the rule), each with
    its own restart delay; a record without them (a rule without `kill`, or none), the scheduler alone, restarted
    `restart_after` later (the step's or the trial's)."""
    listed = (record or {}).get("kill") or []
    if not listed:
        return [Kill("scheduler", restart_after)]
    plan = [Kill(str(k.get("component")), float(k.get("restartAfterSeconds", 0.0))) for k in listed]
    unknown = [k.component for k in plan if k.component not in COMPONENTS]
    if unknown or len({k.component for k in plan}) != len(plan):
        raise ValueError(f"a crash point's kill names {', '.join(k.component for k in plan)}: each of "
                         f"{', '.join(COMPONENTS)} at most once")
    return plan


def kill_and_restart_all(cluster: Cluster | None, plan: list[Kill], now: Callable[[], float],
                         events: list[dict[str, Any]], stop: threading.Event) -> str:
    """The plan's components SIGKILLed one after the other at once (in its order), then each started again its own
    `restart_after` after the kills (sooner if the run ends), in the order of those delays. The scheduler alone is
    `kill_and_restart_scheduler`; kube-controller-manager's events are `controller-manager-killed` and
    `controller-manager-restarted`. Returns what it did."""
    if len(plan) == 1 and plan[0].component == "scheduler":
        return kill_and_restart_scheduler(cluster, plan[0].restart_after, now, events, stop)
    if not plan:
        raise ValueError("a crash point's kill plan is empty")
    if cluster is None:
        raise ValueError("a crash point's kill needs the local control plane (scenario run without --kubeconfig)")
    names = {"scheduler": cluster.scheduler, "kube-controller-manager": "kube-controller-manager"}
    killed_at = time.monotonic()
    did = []
    for k in plan:
        pid = kill_scheduler(cluster) if k.component == "scheduler" else kill_controller_manager(cluster)
        events.append({"t": round(now(), 2), "event": _event(k.component, "killed"), "component": names[k.component],
                       "pid": pid, "time": time.time()})
        did.append(f"{names[k.component]} (pid {pid})")
    text = f"killed {', '.join(did)} at once (kill -9)"
    for k in sorted(plan, key=lambda k: k.restart_after):
        stop.wait(max(0.0, killed_at + k.restart_after - time.monotonic()))
        if k.component == "scheduler":
            ready = start_scheduler(cluster)
            if cluster.yunikorn_url is not None:
                ready += _partition_answers(cluster.yunikorn_url)
        else:
            ready = start_controller_manager(cluster)
        new_pid = cluster.processes[names[k.component]].pid
        down = time.monotonic() - killed_at
        events.append({"t": round(now(), 2), "event": _event(k.component, "restarted"), "component": names[k.component],
                       "pid": new_pid, "time": time.time(), "readySeconds": round(ready, 2),
                       "downSeconds": round(down, 2)})
        text += f"; restarted {names[k.component]} as pid {new_pid}, ready {ready:.1f}s later, down {down:.1f}s"
    return text


def _event(component: str, what: str) -> str:
    """scheduler-killed, controller-manager-restarted, …"""
    return f"{'scheduler' if component == 'scheduler' else 'controller-manager'}-{what}"


def restarted_within(events: Iterable[dict[str, Any]], now: float, quiet: float) -> bool:
    """The settle rule after a crash: whether the last `scheduler-restarted` (or, after a correlated crash,
    `controller-manager-restarted`) of a run's events (times since its start, as `now` is) came less than `quiet`
    seconds ago. A restarted scheduler's view (the allocations it
    recovers, its queues' books) has not settled by then, even if every pod is bound; a scenario and a search
    trial both wait it out."""
    last = max((float(e["t"]) for e in list(events)
                if e["event"] in ("scheduler-restarted", "controller-manager-restarted")), default=None)
    return last is not None and now < last + quiet


def _partition_answers(url: str, timeout: float = 60.0) -> float:
    """Wait until a restarted YuniKorn's REST API lists the default partition's applications (for a moment
    after its healthcheck says ok it answers an error object instead); the seconds it took."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            if isinstance(httpx.get(f"{url}/ws/v1/partition/default/applications/active", timeout=2).json(), list):
                break
        time.sleep(0.2)
    return time.monotonic() - t0


class CrashPoints(threading.Thread):
    """While it runs: on each `crash-point` record in the proxy's journal, the scheduler killed and restarted
    (`restart_after` later), or the components the record names, each restarted after its own delay. The record
    goes into `events`, what was done into `steps` (each at `now()`)."""

    def __init__(self, cluster: Cluster, control: str, restart_after: float, now: Callable[[], float],
                 events: list[dict[str, Any]], steps: list[dict[str, Any]]) -> None:
        super().__init__(daemon=True)
        self.cluster, self.control, self.restart_after, self.now = cluster, control, restart_after, now
        self.events, self.steps = events, steps
        self.stop = threading.Event()
        self.busy = threading.Lock()  # held while the scheduler is down or starting
        self.pids: list[tuple[int, int]] = []  # (killed, restarted)
        with ControlClient(control) as client:
            self.cursor = client.cursor()  # records before the watch are not its business

    def run(self) -> None:
        with ControlClient(self.control) as client:
            while not self.stop.is_set():
                with contextlib.suppress(httpx.HTTPError, ControlError):
                    page = client.journal_after(self.cursor)
                    self.cursor = page.next
                    for record in page.records:
                        if record["event"] == "crash-point":
                            self.crash(record)
                self.stop.wait(POLL_SECONDS)

    def crash(self, record: dict[str, Any]) -> None:
        """One crash point: the record in the events, the kill and the restart in the steps."""
        request = record.get("request") or {}
        self.events.append({"t": round(self.now(), 2), "event": "crash-point", "rule": record.get("rule"),
                            "name": request.get("name"), "namespace": request.get("namespace"),
                            "upstreamStatus": record.get("upstreamStatus")})
        with self.busy:
            t = self.now()
            try:
                before = len(self.events)
                what = kill_and_restart_all(self.cluster, kill_plan(record, self.restart_after), self.now,
                                            self.events, self.stop)
                pids = {e["event"]: int(e["pid"]) for e in self.events[before:]}
                if "scheduler-killed" in pids and "scheduler-restarted" in pids:
                    self.pids.append((pids["scheduler-killed"], pids["scheduler-restarted"]))
            except (ClusterError, OSError, httpx.HTTPError, ValueError) as e:  # the trial reports it; the watch goes on
                what = f"crash point: kill and restart failed: {type(e).__name__}: {e}"
            self.steps.append({"t": round(t, 2), "did": what})

    def idle(self) -> None:
        """Return once no kill or restart is under way."""
        with self.busy:
            pass

    def __enter__(self) -> CrashPoints:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()  # a scheduler that is down starts now
        self.join(150)
