"""Run a scenario end to end on the local control plane, sampling a timeline, and judge it."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lightkube import Client

from kube_fault_proxy.kube.kubeapi import SYSTEM_NAMESPACES
from kube_fault_proxy.proxy import bind_latency
from kube_fault_proxy.rig.actions import pod_churn
from kube_fault_proxy.rig.cluster import versions
from kube_fault_proxy.rig.cluster.control_plane import Options, running
from kube_fault_proxy.rig.cluster.record import ClusterError
from kube_fault_proxy.rig.cluster.schedulers import restart_scheduler
from kube_fault_proxy.rig.console import Progress
from kube_fault_proxy.rig.invariants import check, graceful_stop
from kube_fault_proxy.rig.runs.run_record import RunResult, Target
from kube_fault_proxy.rig.runs.scenario import YUNIKORN_ONLY, Expectation, Scenario
from kube_fault_proxy.rig.runs.timeline import Sampler, Timeline, retry_transport
from kube_fault_proxy.rig.workloads import load, wave

SCHEDULER_NAMES = {"kube-scheduler": "default-scheduler", "yunikorn": "yunikorn"}


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


def run_bind_latency(first: dict[str, Any] | None, last: dict[str, Any] | None) -> dict[str, Any]:
    """The binds that committed during the run (the proxy's histogram at its start and its last sample): count,
    p50/p90/p99 estimated from the buckets, max; empty when the proxy gave none (an older proxy)."""
    if last is None or first is None:
        return {}
    return bind_latency.between(first, last)


def meets(report: check.Report, expect: Expectation | None) -> bool | None:
    """Whether the check matches what the scenario expects of this scheduler (None: no expectation)."""
    if expect is None:
        return None
    failing = {name for name, vs in report.by_invariant().items() if vs}
    if expect.verdict == "clean":
        return failing <= set(expect.mayBreak)
    return not report.ok and set(expect.invariants) <= failing


def stop_steps(scenario: Scenario, scheduler: str) -> int:
    """How many stopScheduler steps the scenario has; ValueError if one's bound is under what this scheduler's
    cited promise allows (graceful_stop.check_bounds): a bound stronger than the promise is refused, not judged."""
    stops = [s.stopScheduler for s in scenario.spec.timeline if s.stopScheduler is not None]
    graceful_stop.check_bounds((s.within for s in stops), scheduler)
    return len(stops)


FRESH_NEEDS_PLANE = ("spec.freshScheduler restarts the scheduler under test before each run: it needs the local "
                     "control plane running it (`scenario run` without --kubeconfig, or --kubeconfig of a plane "
                     "`cluster up --proxy` brought up: <state-dir>/kubeconfigs/admin.kubeconfig)")


def check_fresh(scenario: Scenario, target: Target | None) -> None:
    """ValueError, naming the field, when the scenario asks for a fresh scheduler and the target's cannot be
    restarted (a cluster the rig did not bring up; None: a run's own control plane, always fine)."""
    if scenario.spec.freshScheduler and target is not None and target.cluster is None:
        raise ValueError(FRESH_NEEDS_PLANE)


def fresh_scheduler(target: Target, scenario: Scenario, say: bool, started: bool = False) -> dict[str, Any] | None:
    """With spec.freshScheduler, the scheduler under test restarted (schedulers.restart_scheduler: the same
    build, through the proxy, from a relist with an empty cache) and ready before the run; what happened, for
    the run's record. `started`: the run's own control plane has just started it, so it is fresh already."""
    check_fresh(scenario, target)
    if not scenario.spec.freshScheduler or target.cluster is None:
        return None
    c = target.cluster
    old = c.processes.get(c.scheduler)
    if started:
        return {"restarted": False, "how": "started with the run's own control plane",
                "pid": old.pid if old else None}
    seconds = restart_scheduler(c)
    new = c.processes.get(c.scheduler)
    fresh = {"restarted": True, "how": f"{c.scheduler} restarted before the run", "seconds": round(seconds, 2),
             "oldPid": old.pid if old else None, "pid": new.pid if new else None}
    if say:
        print(f"  fresh scheduler: {fresh['how']} (pid {fresh['oldPid']} -> {fresh['pid']}, ready in "
              f"{seconds:.1f}s)", file=sys.stderr, flush=True)
    return fresh


def run_on(target: Target, scenario: Scenario, scheduler: str, seed: int, say: bool = True,
           build: str | None = None, variant: str | None = None, clean: bool = True,
           started: bool = False) -> RunResult:
    """Load, timeline, settle and check against a running target (judged by the expectation for
    this scheduler, or for this build of it: `variant`, e.g. a patch's name); then (with `clean`)
    delete what the load made, so the next run on the same cluster starts from nothing. With
    spec.freshScheduler the scheduler is restarted first (`started`: the run's own plane has just started it)."""
    spec = scenario.spec
    if spec.load.shape == YUNIKORN_ONLY and scheduler != "yunikorn":
        raise ValueError(f"load.shape {YUNIKORN_ONLY} is YuniKorn's gang scheduling: run it with --scheduler yunikorn")
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
    stops = stop_steps(scenario, scheduler)
    if hold == "beforeScheduler" and target.cluster is None:
        raise ValueError("holdBack beforeScheduler stops and starts the scheduler: it needs the local control plane")
    result.freshScheduler = fresh_scheduler(target, scenario, say, started)
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
            _note_fresh(result, sampler)
            names = _load(target, ls, result, sampler, say)
            if hold is not None:
                release = _release(target, hold, ls, names, spec.load.releaseConcurrency, start_scheduler, sampler,
                                   say)
            snap, quiet = _settle(target, scenario, ls, t0, say, timeline.scheduler_settling)
            snap.cordoned = {**snap.cordoned, **timeline.churn.cordoned}
            snap.lost = dict(timeline.churn.lost)
        _judge(result, snap, quiet, expect, sampler, spec.settle.grace, stops)
    result.load["shape"] = spec.load.shape
    if hold is not None:
        result.wave = wave.summary(release, result.samples)
    result.seconds = round(time.monotonic() - t0, 1)
    if clean:  # the namespace goes (in `default` and other system namespaces, the run's pods)
        with target.kube.client() as api:
            pod_churn.clean_foreign(api, ls.namespace, ls.run_id)
            pods = load.clean(api, ls.namespace, None if ls.namespace not in SYSTEM_NAMESPACES else ls.run_id)
        if say:
            print(f"  deleted the load's {pods} pods in {time.monotonic() - t0 - result.seconds:.1f}s",
                  file=sys.stderr, flush=True)
    return result


def _note_fresh(result: RunResult, sampler: Sampler) -> None:
    """A fresh scheduler's restart (done before the run began) in the run's steps and events, at its start."""
    fresh = result.freshScheduler
    if fresh is None:
        return
    how = fresh["how"] + (f" in {fresh['seconds']}s" if fresh["restarted"] else "")
    # first: the timeline's steps, begun with the sampler, may already be in (the restart came before them all)
    result.steps.insert(0, {"t": 0.0, "did": f"fresh scheduler: {how} (pid {fresh['pid']})"})
    sampler.events.append({"t": 0.0, "event": "scheduler-fresh", **fresh})


def _load(target: Target, ls: load.LoadSpec, result: RunResult, sampler: Sampler, say: bool) -> list[str]:
    """Create the scenario's pods at its rate; their names."""
    if say:
        print(f"  creating {ls.count} pods at {ls.rate:g}/s for {result.scheduler}", file=sys.stderr, flush=True)
    created = load.create_pods(target.kube, ls, progress=say)
    result.load = created.as_dict()
    if not created.created:  # nothing to judge: a verdict of "clean" on no pods would be a false one
        why = ", ".join(f"{n} {kind}" for kind, n in sorted(created.errors.items())) or "none answered"
        raise ClusterError(f"the load created none of its {ls.count} pods in namespace {ls.namespace} ({why}); "
                           "a namespace still terminating after an earlier run refuses them all")
    sampler.events.append({"t": round(time.monotonic() - sampler.t0, 2), "event": "load-done"})
    return created.names


def _release(target: Target, hold: str, ls: load.LoadSpec, names: list[str], concurrency: int,
             start_scheduler: Any, sampler: Sampler, say: bool) -> dict[str, Any]:
    """Release a held-back load at once: lift every pod's gate, or start the stopped scheduler (its
    first list is the wave). The `wave-released` event says when, how many were pending, and how long
    the release itself took."""
    pending = retry_transport(lambda: wave.pending(target.kube, ls.namespace, load.LOAD_LABEL, ls.run_id))
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
        snap: check.Snapshot = retry_transport(lambda: check.fetch(api, yunikorn), 120)
        if snap.yunikorn is None or isinstance(snap.yunikorn.get("apps"), list):
            return snap
        time.sleep(0.5)
    raise ValueError(f"YuniKorn's REST API at {yunikorn} did not list the partition's applications")


def _judge(result: RunResult, snap: check.Snapshot, quiet: bool, expect: Expectation | None,
           sampler: Sampler, grace: float, stops: int = 0) -> None:
    """The invariants on the settled cluster (and, with `stops` stopScheduler steps, on the run's stops), the
    timeline and bind outcomes, and whether it met the expectation."""
    # the timeline's own events (apiserver-killed, wave-released) arrive beside the sampler's: in time order
    result.samples, result.events = sampler.samples, sorted(sampler.events, key=lambda e: float(e["t"]))
    report = check.evaluate(snap, {SCHEDULER_NAMES[result.scheduler]}, grace)
    if stops:
        report.checked.append(graceful_stop.NAME)
        report.violations += graceful_stop.judge_stops(result.events, stops)
    report.quiet = quiet
    result.check = report.as_dict()
    result.table = check.render(report)
    result.report = report
    result.binds = bind_outcomes(result, report.as_dict())
    result.bindLatency = run_bind_latency(sampler.latency_first, sampler.latency_last)
    result.met = meets(report, expect)


def run_local(scenario: Scenario, scheduler: str, seed: int, state_dir: Path, profiles_dir: Path,
              say: bool = True, patch: Path | None = None, yunikorn_source: Path | None = None,
              feature_gates: Mapping[str, Mapping[str, bool]] | None = None,
              kubernetes: str = versions.KUBERNETES) -> RunResult:
    """Bring up the local control plane with the proxy and this scheduler, run, tear down (the scheduler is
    built with `patch`, if given, and a YuniKorn from `yunikorn_source`; `feature_gates` go to the components, all
    of the Kubernetes release `kubernetes`)."""
    yk = scheduler == "yunikorn"
    opts = Options(state_dir=state_dir, nodes=scenario.spec.cluster.nodes, scheduler=scheduler, proxy=True,
                   profiles_dir=profiles_dir, yunikorn_patch=patch if yk else None,
                   yunikorn_source=yunikorn_source if yk else None, feature_gates=feature_gates or {},
                   kubernetes=kubernetes, kube_scheduler_patch=patch if scheduler == "kube-scheduler" else None)
    with running(opts) as c:  # the whole control plane goes after the run, so the run cleans nothing itself
        result = run_on(Target(c.admin_api(), c.control_url, c.yunikorn_url, c), scenario, scheduler, seed, say,
                        c.scheduler_build, c.scheduler_variant, clean=False, started=True)
        result.featureGates = c.feature_gates
        return result
