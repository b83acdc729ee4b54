"""Run a scenario end to end on the local control plane, sampling a timeline, and judge it."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from lightkube import Client

from kube_fault_proxy.kube.kubeapi import SYSTEM_NAMESPACES, ApiError, HTTPError, Kube, Pod, TransportError
from kube_fault_proxy.proxy.control.client import ControlClient, ControlError
from kube_fault_proxy.rig.actions import node_churn, pod_churn
from kube_fault_proxy.rig.actions.apiserver_kill import kill_and_restart
from kube_fault_proxy.rig.actions.scheduler_kill import kill_and_restart_scheduler, restarted_within
from kube_fault_proxy.rig.cluster import versions
from kube_fault_proxy.rig.cluster.control_plane import Options, running
from kube_fault_proxy.rig.cluster.record import Cluster, ClusterError
from kube_fault_proxy.rig.console import Progress
from kube_fault_proxy.rig.invariants import check
from kube_fault_proxy.rig.invariants.check import Report
from kube_fault_proxy.rig.runs.journal_tail import JournalTail
from kube_fault_proxy.rig.runs.scenario import Expectation, Scenario, Step
from kube_fault_proxy.rig.workloads import load, wave

SCHEDULER_NAMES = {"kube-scheduler": "default-scheduler", "yunikorn": "yunikorn"}
# Node and pod steps (rig/actions/node_churn.py, pod_churn.py): performed on the timeline's own connection.
CHURN = frozenset(("deleteNode", "restoreNode", "flapNode", "cordonNode", "uncordonNode", "resizeNode",
                   "createForeignPods", "terminateForeignPods", "deletePod"))
# Journal events a step may wait for that the timeline reads itself, at once: a crashPoint rule's held commit,
# and the first injection of any rule (a marker rule's, such as binds-answered-200's: the outage's moment).
TAILED = ("crash-point", "inject")


@dataclass
class Target:
    """Where a run happens: the apiserver (admin), the proxy's control plane, YuniKorn's REST API, and
    the local control plane when the run may stop and start its components (holdBack
    beforeScheduler, killApiserver, killScheduler)."""

    kube: Kube
    control: str
    yunikorn: str | None = None
    cluster: Cluster | None = None


@dataclass
class RunResult:
    """One run of a scenario with one scheduler and one seed."""

    scenario: str
    scheduler: str
    seed: int
    load: dict[str, Any] = field(default_factory=dict)
    check: dict[str, Any] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    expected: dict[str, Any] | None = None
    # The scheduler's exact build plus its gates (the target): "yunikorn v1.9.0+3355-forget-pod-reverts-1830f1776417"
    # or "kube-scheduler v1.36.3 SchedulerAsyncAPICalls=true".
    build: str | None = None
    featureGates: dict[str, dict[str, bool]] = field(default_factory=dict)  # component -> gate -> on, as run
    binds: dict[str, Any] = field(default_factory=dict)
    wave: dict[str, Any] | None = None  # a held-back load's release (wave.summary)
    met: bool | None = None
    seconds: float = 0.0
    table: str = ""
    report: Report | None = None  # for the terminal table; not in the JSON

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {k: v for k, v in self.__dict__.items() if k not in ("table", "report")}


def bind_outcomes(result: RunResult, checked: dict[str, Any]) -> dict[str, Any]:
    """Binding POSTs as the scheduler saw them (the proxy's counters), and the connections it made.

    throttled: 429s with Retry-After (API Priority and Fairness, or the throttle fault), which client-go
    waited out and sent again itself: the scheduler never heard of them; failed: every other answer
    but a 2xx, or none. committedWithoutAnswer: pods the apiserver bound although the scheduler never saw their Binding
    succeed (an outage took the answer, or commitThenFail replaced it).

    With the real apiserver killed (killApiserver) instead of the proxy's outage, the counts are the
    same Binding POSTs, through the proxy: succeeded, those a live apiserver answered 2xx; failed,
    those answered otherwise, including the proxy's own error answer for a request whose upstream
    connection died with the apiserver or could not be made while it was down; committedWithoutAnswer,
    Bindings the dying apiserver had written to etcd before it could answer (the scheduler saw a
    broken connection, the pod is bound). beforeOutage is counted at the outage's start or the kill."""
    if not result.samples:
        return {}
    first, last = result.samples[0], result.samples[-1]
    succeeded = last["bindsSucceeded"] - first["bindsSucceeded"]
    start = next((e for e in result.events if e["event"] in ("outage-start", "apiserver-killed")), None)
    before = None
    if start is not None and "bindsSucceeded" in start:
        before = {"succeeded": start["bindsSucceeded"] - first["bindsSucceeded"],
                  "throttled": start["bindsThrottled"] - first["bindsThrottled"],
                  "failed": start["bindsFailed"] - first["bindsFailed"]}
    accepted = [s["clientConnectionsAccepted"] for s in result.samples
                if s.get("clientConnectionsAccepted") is not None]
    return {"succeeded": succeeded, "throttled": last["bindsThrottled"] - first["bindsThrottled"],
            "failed": last["bindsFailed"] - first["bindsFailed"],
            "committedWithoutAnswer": max(0, int(checked["counts"].get("bound", 0)) - succeeded),
            "beforeOutage": before, "clientConnectionsAccepted": accepted[-1] - accepted[0] if accepted else None}


def meets(report: check.Report, expect: Expectation | None) -> bool | None:
    """Whether the check matches what the scenario expects of this scheduler (None: no expectation)."""
    if expect is None:
        return None
    failing = {name for name, vs in report.by_invariant().items() if vs}
    if expect.verdict == "clean":
        return failing <= set(expect.mayBreak)
    return not report.ok and set(expect.invariants) <= failing


def timeline_sample(t: float, pods: Sequence[Any], stats: dict[str, Any]) -> dict[str, Any]:
    """One point of a run's timeline: its pods (bound, pending) and the proxy's bind and connection counters."""
    binds, conns = stats["bindsTotal"], stats.get("connections", {})
    bound = sum(1 for p in pods if p["spec"].get("nodeName"))
    return {"t": t, "pods": len(pods), "bound": bound, "pending": len(pods) - bound,
            "bindsSucceeded": binds["succeeded"], "bindsThrottled": binds["throttled"], "bindsFailed": binds["failed"],
            "clientConnectionsOpen": conns.get("clientOpen"), "clientConnectionsAccepted": conns.get("clientAccepted")}


def journal_event(record: dict[str, Any], read_at: float, wall0: float) -> dict[str, Any]:
    """A journal record as a run event, at the run time the proxy wrote it (its wall-clock `time` less the
    run's start `wall0`), not when the once-a-second sampler read it: on a busy machine a sample takes
    seconds (an outage's start read 1.3 s early or late moves the whole outage on the timeline)."""
    t = round(float(record["time"]) - wall0, 2) if "time" in record else read_at
    return {"t": max(t, 0.0), **{k: v for k, v in record.items() if k != "request"}}


class Sampler(threading.Thread):
    """Once a second: the load's pods (bound, pending), Binding outcomes, new journal records."""

    def __init__(self, target: Target, namespace: str, run_id: str, t0: float) -> None:
        super().__init__(daemon=True)
        self.target, self.namespace, self.run_id, self.t0 = target, namespace, run_id, t0
        self.wall0 = time.time() - (time.monotonic() - t0)  # t0 on the wall clock the journal's records carry
        self.samples: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.stop = threading.Event()
        # Read before the thread starts (so before the timeline's first step): a step at 0 s must
        # not race the thread's first read of the journal and be missed.
        with ControlClient(self.target.control) as control:
            self.cursor = control.cursor()

    def run(self) -> None:
        with self.target.kube.client() as api, ControlClient(self.target.control) as control:
            while not self.stop.is_set():
                with contextlib.suppress(httpx.HTTPError, ControlError, HTTPError, KeyError):
                    self.sample(api, control)
                self.stop.wait(1.0)

    def sample(self, api: Client, control: ControlClient) -> None:
        t = round(time.monotonic() - self.t0, 2)
        pods = list(api.list(Pod, namespace=self.namespace, labels={load.LOAD_LABEL: self.run_id}))
        stats = control.stats()
        page = control.journal(self.cursor)
        self.cursor = page.next
        for r in page.records:
            if r["event"] in ("activate", "deactivate", "outage-start", "outage-end", "crash-point",
                              "crash-point-released"):
                self.events.append(journal_event(r, t, self.wall0))
        self.samples.append(timeline_sample(t, pods, stats))

    def seen(self, event: str) -> float | None:
        """When (seconds since t0) a journal event was first seen."""
        return next((e["t"] for e in self.events if e["event"] == event), None)

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join(10)


class Timeline(threading.Thread):
    """The scenario's steps, each performed once it is due: at a time after the load began, or after an event
    the sampler saw. Steps at 0 s are performed on entry, before the first pod exists."""

    churning = False  # a node or pod step is under way (a flap waits out its down time)
    last_churn: float | None = None  # when (seconds since t0) the last node or pod step ended

    def __init__(self, steps: list[Step], target: Target, seed: int, ls: load.LoadSpec, sampler: Sampler,
                 result: RunResult, say: bool) -> None:
        super().__init__(daemon=True)
        self.pending, self.target, self.seed, self.ls = list(steps), target, seed, ls
        self.sampler, self.result, self.say = sampler, result, say
        self.stop = threading.Event()
        self.load_started = time.monotonic()
        self.binds_reached: dict[int, float] = {}  # step index -> when its afterBinds count was reached
        self.binds_base = self._binds() if any(s.afterBinds for s in steps) else 0
        self.killing = False  # a killApiserver or killScheduler step is under way: the exit waits for its restart
        # onEvent crash-point and inject are read from the journal here (its file, on the local control plane),
        # not once a second by the sampler: the scheduler is killed within a poll of the commit whose answer the
        # proxy holds, the apiserver within a poll of the injection that marks the moment.
        tailed = any(s.onEvent in TAILED for s in steps)
        path = target.cluster.journal if target.cluster is not None else None
        self.journal = JournalTail(target.control, sampler.cursor, path) if tailed else None
        self.journal_seen: dict[str, float] = {}  # event -> when (seconds since t0) the proxy wrote its first record
        self.journal_first: dict[str, dict[str, Any]] = {}  # event -> its first record (a held Binding's pod, node)
        self.scheduler_down = False  # a killScheduler step is under way
        self.churn = node_churn.NodeChurn(lambda: target.kube.client())  # its own connection, opened at first use

    def scheduler_settling(self, quiet: float) -> bool:
        """Whether a killScheduler step is under way, or still to come at a time or a bind count (it will come;
        an onEvent one may never), or its scheduler restarted less than `quiet` ago: the restarted scheduler's
        view (the allocations it recovers, its queues' books) has not settled yet, even if every pod is bound."""
        if self.scheduler_down or self.churning or any(
                s.onEvent is None and (s.killScheduler is not None or set(s.actions()) & CHURN)
                for s in list(self.pending)):
            return True
        now = time.monotonic() - self.sampler.t0
        return restarted_within(self.sampler.events, now, quiet) or (
            self.last_churn is not None and now < self.last_churn + quiet)

    def _binds(self) -> int:
        with ControlClient(self.target.control) as control:
            return int(control.stats()["bindsTotal"]["succeeded"])

    def due(self, step: Step) -> bool:
        """Whether a step's time has come."""
        now = time.monotonic()
        if step.at is not None:
            return now - self.load_started >= step.at + step.after
        if step.afterBinds is not None:
            key = id(step)
            if key not in self.binds_reached:
                with contextlib.suppress(httpx.HTTPError, ControlError, KeyError):
                    if self._binds() - self.binds_base >= step.afterBinds:
                        self.binds_reached[key] = now
            return key in self.binds_reached and now >= self.binds_reached[key] + step.after
        event = str(step.onEvent)
        seen = self._journal(event) if event in TAILED else self.sampler.seen(event)
        return seen is not None and now - self.sampler.t0 >= seen + step.after

    def _journal(self, event: str) -> float | None:
        """When (seconds since t0) the proxy wrote the first record of a tailed event, if it has."""
        if event not in self.journal_seen and self.journal is not None:
            read_at = time.monotonic() - self.sampler.t0
            for r in self.journal.read():
                if r.get("event") in TAILED and str(r["event"]) not in self.journal_seen:
                    self.journal_seen[str(r["event"])] = journal_event(r, read_at, self.sampler.wall0)["t"]
                    self.journal_first[str(r["event"])] = r
        return self.journal_seen.get(event)

    def run_due(self) -> None:
        """Perform every step that is due, once; a step that fails is reported, not fatal."""
        for step in [s for s in self.pending if self.due(s)]:
            self.pending.remove(step)
            began = time.monotonic()
            try:
                if step.killApiserver is not None:
                    self.killing = True
                    what = kill_and_restart(self.target.cluster, self.target.control, step.killApiserver.restartAfter,
                                            self.sampler.t0, self.sampler.events, self.stop)
                elif step.killScheduler is not None:
                    self.killing = self.scheduler_down = True
                    what = kill_and_restart_scheduler(self.target.cluster, step.killScheduler.restartAfter,
                                                      lambda: time.monotonic() - self.sampler.t0, self.sampler.events,
                                                      self.stop)
                elif set(step.actions()) & CHURN:
                    self.churning = True
                    what = self.perform_churn(step)
                else:
                    what = _perform(step, self.target, self.seed, self.ls.namespace, self.ls.run_id, self.stop)
            except (httpx.HTTPError, ControlError, HTTPError, ClusterError, ValueError, ApiError) as e:
                what = f"step failed: {type(e).__name__}: {e}"
            finally:
                if self.churning:
                    self.last_churn = time.monotonic() - self.sampler.t0
                self.killing = self.scheduler_down = self.churning = False
            # a kill is placed where it began (its restart is the apiserver-restarted event); others where they ended
            killed = step.killApiserver is not None or step.killScheduler is not None
            t = (began if killed else time.monotonic()) - self.sampler.t0
            self.result.steps.append({"t": round(t, 2), "did": what})
            if self.say:
                print(f"  [{t:5.1f}s] {what}", file=sys.stderr, flush=True)

    def perform_churn(self, step: Step) -> str:
        """One node or pod step; `held` names the node or pod of the Binding the step's trigger record holds."""
        def held() -> dict[str, Any] | None:
            return self.journal_first.get(str(step.onEvent))
        churn, ns, run_id = self.churn, self.ls.namespace, self.ls.run_id

        def node(ref: str) -> str:
            return node_churn.resolve(ref, held, "targetNode")
        if step.deleteNode is not None:
            return churn.delete(node(step.deleteNode.node))
        if step.restoreNode is not None:
            return churn.restore(node(step.restoreNode.node))
        if step.flapNode is not None:
            return churn.flap(node(step.flapNode.node), step.flapNode.downSeconds, self.stop)
        if step.cordonNode is not None or step.uncordonNode is not None:
            target = step.cordonNode or step.uncordonNode
            assert target is not None
            return churn.cordon(node(target.node), step.cordonNode is not None)
        if step.resizeNode is not None:
            r = step.resizeNode
            return churn.resize(node(r.node), r.cpu, r.memory, r.pods)
        if step.createForeignPods is not None:
            f = step.createForeignPods
            return pod_churn.create_foreign(churn.api, ns, run_id, node(f.node), f.count, f.cpu)
        if step.terminateForeignPods:
            return pod_churn.terminate_foreign(churn.api, ns, run_id)
        assert step.deletePod is not None
        record = held() or {}
        name = node_churn.resolve(step.deletePod.pod, held, "name")
        return pod_churn.delete_pod(churn.api, name, str((record.get("request") or {}).get("namespace") or ns))

    def run(self) -> None:
        while not self.stop.is_set() and self.pending:
            self.run_due()
            # a count of binds moves by hundreds a second in a wave: read it more often than the clock
            self.stop.wait(0.05 if any(s.afterBinds is not None or s.onEvent in TAILED
                                       for s in self.pending) else 0.2)

    def __enter__(self) -> Timeline:
        self.load_started = time.monotonic()
        self.run_due()
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.join(5)
        if self.killing or self.churning:  # the apiserver, scheduler or a flapped node is coming back: at once, now
            self.join(150)
        try:  # a node the run deleted is created again: the next run finds the cluster it was given
            for what in self.churn.restore_all():
                self.result.steps.append({"t": round(time.monotonic() - self.sampler.t0, 2), "did": what})
        finally:
            self.churn.close()


def _retry(call: Any, attempts: int = 3) -> Any:
    """A call, retried on transport errors (the apiserver may have just come back)."""
    for attempt in range(attempts):
        try:
            return call()
        except (httpx.TransportError, TransportError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)
    raise AssertionError("unreachable")


def _perform(step: Step, target: Target, seed: int, namespace: str, run_id: str,
             stop: threading.Event | None = None) -> str:
    """One timeline step. A touch stops early once the run has ended (`stop`): at the seed's scale
    touching 3,000 pods one patch at a time can outlast the settle, and the cluster then goes."""
    with ControlClient(target.control) as control:
        if step.activate is not None:
            control.activate(step.activate, seed)
            return f"activate {step.activate} (seed {seed})"
        if step.deactivate:
            control.deactivate()
            return "deactivate"
    with target.kube.client() as api:  # the timeline thread's own connection
        pods = _retry(lambda: list(api.list(Pod, namespace=namespace, labels={load.LOAD_LABEL: run_id})))
        for n, p in enumerate(pods):
            if stop is not None and stop.is_set():
                return f"touched {n} of {len(pods)} pods (stopped: the run had ended)"
            _retry(lambda name=p["metadata"]["name"]: load.touch_pod(api, name, namespace))
    return f"touched {len(pods)} pods"


def run_on(target: Target, scenario: Scenario, scheduler: str, seed: int, say: bool = True,
           build: str | None = None, variant: str | None = None, clean: bool = True) -> RunResult:
    """Load, timeline, settle and check against a running target (judged by the expectation for
    this scheduler, or for this build of it: `variant`, e.g. a patch's name); then (with `clean`)
    delete what the load made, so the next run on the same cluster starts from nothing."""
    spec = scenario.spec
    ls = load.LoadSpec(count=spec.load.count, rate=spec.load.rate, concurrency=spec.load.concurrency,
                       namespace=spec.load.namespace, scheduler_name=SCHEDULER_NAMES[scheduler],
                       cpu=spec.load.cpu, memory=spec.load.memory,
                       scheduling_gates=(wave.GATE,) if spec.load.holdBack == "schedulingGates" else (),
                       # a killed apiserver takes the load's creations too: those are sent again once it is back
                       retry_unreachable=any(s.killApiserver is not None for s in spec.timeline))
    result = RunResult(scenario.metadata.name, scheduler, seed, expected=None, build=build)
    expect = spec.expectation(scheduler, variant)
    result.expected = expect.model_dump() if expect else None
    hold = spec.load.holdBack
    if hold == "beforeScheduler" and target.cluster is None:
        raise ValueError("holdBack beforeScheduler stops and starts the scheduler: it needs the local control plane")
    t0 = time.monotonic()
    # A tight shape's nodes for the run, put back after it.
    with load.shaped(target.kube, spec.load.shape, spec.load.count, seed, ls.namespace) as workload:
        if workload is not None:
            ls = dataclasses.replace(ls, pods=workload.pods)
            if say:
                print(f"  shape {workload.shape}: {len(workload.nodes)} nodes given its capacity, labels and taints",
                      file=sys.stderr, flush=True)
        # With holdBack beforeScheduler the scheduler is stopped first and runs again however the run ends.
        with wave.scheduler_stopped(target.cluster if hold == "beforeScheduler" else None) as start_scheduler, \
                Sampler(target, ls.namespace, ls.run_id, t0) as sampler, \
                Timeline(list(spec.timeline), target, seed, ls, sampler, result, say) as timeline:  # end with the run
            names = _load(target, ls, result, sampler, say)
            if hold is not None:
                release = _release(target, hold, ls, names, spec.load.releaseConcurrency, start_scheduler, sampler,
                                   say)
            snap, quiet = _settle(target, scenario, ls, t0, say, timeline.scheduler_settling)
            snap.cordoned = {**snap.cordoned, **timeline.churn.cordoned}
            snap.lost = dict(timeline.churn.lost)
        _judge(result, snap, quiet, expect, sampler, spec.settle.grace)
    result.load["shape"] = spec.load.shape
    if hold is not None:
        result.wave = wave.summary(release, result.samples)
    result.seconds = round(time.monotonic() - t0, 1)
    if clean:  # the namespace goes (in `default` and other system namespaces, the run's pods)
        with target.kube.client() as api:
            pod_churn.clean_foreign(api, ls.namespace, ls.run_id)
            load.clean(api, ls.namespace, None if ls.namespace not in SYSTEM_NAMESPACES else ls.run_id)
    return result


def _load(target: Target, ls: load.LoadSpec, result: RunResult, sampler: Sampler, say: bool) -> list[str]:
    """Create the scenario's pods at its rate; their names."""
    if say:
        print(f"  creating {ls.count} pods at {ls.rate:g}/s for {result.scheduler}", file=sys.stderr, flush=True)
    created = load.create_pods(target.kube, ls, progress=say)
    result.load = created.as_dict()
    sampler.events.append({"t": round(time.monotonic() - sampler.t0, 2), "event": "load-done"})
    return created.names


def _release(target: Target, hold: str, ls: load.LoadSpec, names: list[str], concurrency: int,
             start_scheduler: Any, sampler: Sampler, say: bool) -> dict[str, Any]:
    """Release a held-back load at once: lift every pod's gate, or start the stopped scheduler (its
    first list is the wave). The `wave-released` event says when, how many were pending, and how long
    the release itself took."""
    pending = _retry(lambda: wave.pending(target.kube, ls.namespace, load.LOAD_LABEL, ls.run_id))
    t = time.monotonic() - sampler.t0
    failed = 0
    if hold == "schedulingGates":
        seconds, failed = wave.lift_gates(target.kube, ls.namespace, names, concurrency)
        how = f"lifted {len(names) - failed} pods' scheduling gates ({concurrency} in flight)"
    else:
        seconds = start_scheduler()
        how = "started the scheduler"
    release = {"holdBack": hold, "t": round(t, 2), "pending": pending, "releaseSeconds": round(seconds, 2),
               "releaseFailed": failed}
    sampler.events.append({**release, "event": "wave-released"})
    if say:
        print(f"  [{t:5.1f}s] wave released: {pending} pods pending; {how} in {seconds:.2f}s",
              file=sys.stderr, flush=True)
    return release


def _settle(target: Target, scenario: Scenario, ls: load.LoadSpec, t0: float, say: bool,
            scheduler_settling: Callable[[float], bool] = lambda quiet: False) -> tuple[check.Snapshot, bool]:
    """Wait until every pod of the load is bound, or nothing changed for the settle's quiet time; after a
    killScheduler step, every pod bound counts only once the restarted scheduler has had the quiet time."""
    settle = scenario.spec.settle
    with Progress("settling", ls.count, enabled=say) as bar:
        def tick(snap: check.Snapshot) -> None:
            mine = [p for p in snap.pods if p["metadata"].get("labels", {}).get(load.LOAD_LABEL) == ls.run_id]
            bound = sum(1 for p in mine if p["spec"].get("nodeName"))
            bar.update(bound, len(mine) or ls.count, f"bound, {time.monotonic() - t0:.0f}s into the run")

        bound = check.all_bound(ls.namespace, load.LOAD_LABEL)

        def done(snap: check.Snapshot) -> bool:
            return bound(snap) and not scheduler_settling(settle.quiet)

        with target.kube.client() as api:
            # a killApiserver step may have the apiserver down for a while: wait for it, up to a minute per read
            return check.wait_quiet(lambda: _fetch_ready(api, target.yunikorn), settle.quiet, settle.timeout, tick,
                                    done)


def _fetch_ready(api: Client, yunikorn: str | None, attempts: int = 60) -> check.Snapshot:
    """A snapshot, once YuniKorn's REST API lists the partition's applications: a YuniKorn that just started
    (or was restarted by a killScheduler step) answers an error object for a moment."""
    for _ in range(attempts):
        snap: check.Snapshot = _retry(lambda: check.fetch(api, yunikorn), 120)
        if snap.yunikorn is None or isinstance(snap.yunikorn.get("apps"), list):
            return snap
        time.sleep(0.5)
    raise ValueError(f"YuniKorn's REST API at {yunikorn} did not list the partition's applications")


def _judge(result: RunResult, snap: check.Snapshot, quiet: bool, expect: Expectation | None,
           sampler: Sampler, grace: float) -> None:
    """The invariants on the settled cluster, the timeline and bind outcomes, and whether it met the expectation."""
    report = check.evaluate(snap, {SCHEDULER_NAMES[result.scheduler]}, grace)
    report.quiet = quiet
    result.check = report.as_dict()
    result.table = check.render(report)
    result.report = report
    # the timeline's own events (apiserver-killed, wave-released) arrive beside the sampler's: in time order
    result.samples, result.events = sampler.samples, sorted(sampler.events, key=lambda e: float(e["t"]))
    result.binds = bind_outcomes(result, report.as_dict())
    result.met = meets(report, expect)


def run_local(scenario: Scenario, scheduler: str, seed: int, state_dir: Path, profiles_dir: Path,
              say: bool = True, yunikorn_patch: Path | None = None, yunikorn_source: Path | None = None,
              feature_gates: Mapping[str, Mapping[str, bool]] | None = None,
              kubernetes: str = versions.KUBERNETES) -> RunResult:
    """Bring up the local control plane with the proxy and this scheduler, run, tear down (a
    YuniKorn run uses the patched or source-tree build, if given; `feature_gates` go to the components, all
    of the Kubernetes release `kubernetes`)."""
    yk = scheduler == "yunikorn"
    opts = Options(state_dir=state_dir, nodes=scenario.spec.cluster.nodes, scheduler=scheduler, proxy=True,
                   profiles_dir=profiles_dir, yunikorn_patch=yunikorn_patch if yk else None,
                   yunikorn_source=yunikorn_source if yk else None, feature_gates=feature_gates or {},
                   kubernetes=kubernetes)
    with running(opts) as c:  # the whole control plane goes after the run, so the run cleans nothing itself
        result = run_on(Target(c.admin_api(), c.control_url, c.yunikorn_url, c), scenario, scheduler, seed, say,
                        c.scheduler_build, c.scheduler_variant, clean=False)
        result.featureGates = c.feature_gates
        return result
