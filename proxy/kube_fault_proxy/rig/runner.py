"""Run a scenario end to end on the local control plane, sampling a timeline, and judge it."""

from __future__ import annotations

import contextlib
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from lightkube import Client

from kube_fault_proxy.kube.kubeapi import SYSTEM_NAMESPACES, HTTPError, Kube, Pod, TransportError
from kube_fault_proxy.rig import invariants as check
from kube_fault_proxy.rig import load
from kube_fault_proxy.rig.cluster.control_plane import Cluster, Options, down, up
from kube_fault_proxy.rig.console import Progress
from kube_fault_proxy.rig.invariants import Report
from kube_fault_proxy.rig.scenario import Expectation, Scenario, Step

SCHEDULER_NAMES = {"kube-scheduler": "default-scheduler", "yunikorn": "yunikorn"}


@dataclass
class Target:
    """Where a run happens: the apiserver (admin), the proxy's control plane, YuniKorn's REST API."""

    kube: Kube
    control: str
    yunikorn: str | None = None


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
    build: str | None = None  # the scheduler's exact build, e.g. "yunikorn v1.9.0+3355-forget-pod-reverts-1830f1776417"
    binds: dict[str, Any] = field(default_factory=dict)
    met: bool | None = None
    seconds: float = 0.0
    table: str = ""
    report: Report | None = None  # for the terminal table; not in the JSON

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {k: v for k, v in self.__dict__.items() if k not in ("table", "report")}


def bind_outcomes(result: RunResult, checked: dict[str, Any]) -> dict[str, Any]:
    """Binding POSTs as the scheduler saw them (the proxy's counters), and the connections it made.

    committedWithoutAnswer: pods the apiserver bound although the scheduler never saw their Binding
    succeed (an outage took the answer, or commitThenFail replaced it)."""
    if not result.samples:
        return {}
    first, last = result.samples[0], result.samples[-1]
    succeeded = last["bindsSucceeded"] - first["bindsSucceeded"]
    start = next((e for e in result.events if e["event"] == "outage-start"), None)
    before = None
    if start is not None and "bindsSucceeded" in start:
        before = {"succeeded": start["bindsSucceeded"] - first["bindsSucceeded"],
                  "failed": start["bindsFailed"] - first["bindsFailed"]}
    accepted = [s["clientConnectionsAccepted"] for s in result.samples
                if s.get("clientConnectionsAccepted") is not None]
    return {"succeeded": succeeded, "failed": last["bindsFailed"] - first["bindsFailed"],
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


class Sampler(threading.Thread):
    """Once a second: the load's pods (bound, pending), Binding outcomes, new journal records."""

    def __init__(self, target: Target, namespace: str, run_id: str, t0: float) -> None:
        super().__init__(daemon=True)
        self.target, self.namespace, self.run_id, self.t0 = target, namespace, run_id, t0
        self.samples: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.stop = threading.Event()
        # Read before the thread starts (so before the timeline's first step): a step at 0 s must
        # not race the thread's first read of the journal and be missed.
        with httpx.Client(base_url=self.target.control, timeout=10) as control:
            self.cursor = int(control.get("/v1/journal", params={"since": 0, "limit": 10000}).json()["next"])

    def run(self) -> None:
        with self.target.kube.client() as api, httpx.Client(base_url=self.target.control, timeout=10) as control:
            while not self.stop.is_set():
                with contextlib.suppress(httpx.HTTPError, HTTPError, KeyError):
                    self.sample(api, control)
                self.stop.wait(1.0)

    def sample(self, api: Client, control: httpx.Client) -> None:
        t = round(time.monotonic() - self.t0, 2)
        pods = list(api.list(Pod, namespace=self.namespace, labels={load.LOAD_LABEL: self.run_id}))
        stats = control.get("/v1/stats").json()
        binds, conns = stats["bindsTotal"], stats.get("connections", {})
        page = control.get("/v1/journal", params={"since": self.cursor, "limit": 10000}).json()
        self.cursor = page["next"]
        for r in page["records"]:
            if r["event"] in ("activate", "deactivate", "outage-start", "outage-end"):
                self.events.append({"t": t, **{k: v for k, v in r.items() if k != "request"}})
        bound = sum(1 for p in pods if p["spec"].get("nodeName"))
        self.samples.append({"t": t, "pods": len(pods), "bound": bound, "pending": len(pods) - bound,
                             "bindsSucceeded": binds["succeeded"], "bindsFailed": binds["failed"],
                             "clientConnectionsOpen": conns.get("clientOpen"),
                             "clientConnectionsAccepted": conns.get("clientAccepted")})

    def seen(self, event: str) -> float | None:
        """When (seconds since t0) a journal event was first seen."""
        return next((e["t"] for e in self.events if e["event"] == event), None)


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
    with httpx.Client(base_url=target.control, timeout=10) as control:
        if step.activate is not None:
            control.put("/v1/active", json={"profile": step.activate, "seed": seed}).raise_for_status()
            return f"activate {step.activate} (seed {seed})"
        if step.deactivate:
            control.delete("/v1/active").raise_for_status()
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
    result = RunResult(scenario.metadata.name, scheduler, seed, expected=None, build=build)
    expect = spec.expectation(scheduler, variant)
    result.expected = expect.model_dump() if expect else None
    ls = load.LoadSpec(count=spec.load.count, rate=spec.load.rate, concurrency=spec.load.concurrency,
                       namespace=spec.load.namespace, scheduler_name=SCHEDULER_NAMES[scheduler],
                       cpu=spec.load.cpu, memory=spec.load.memory)
    t0 = time.monotonic()
    sampler = Sampler(target, ls.namespace, ls.run_id, t0)
    sampler.start()
    pending = list(spec.timeline)

    def due(step: Step, load_started: float | None) -> bool:
        if step.at is not None:
            return load_started is not None and time.monotonic() - load_started >= step.at + step.after
        seen = sampler.seen(str(step.onEvent))
        return seen is not None and time.monotonic() - t0 >= seen + step.after

    def run_due(load_started: float | None) -> None:
        for step in [s for s in pending if due(s, load_started)]:
            pending.remove(step)
            try:
                what = _perform(step, target, seed, ls.namespace, ls.run_id, stop)
            except (httpx.HTTPError, HTTPError) as e:  # a step that fails is reported, not fatal
                what = f"step failed: {type(e).__name__}: {e}"
            result.steps.append({"t": round(time.monotonic() - t0, 2), "did": what})
            if say:
                print(f"  [{time.monotonic() - t0:5.1f}s] {what}", file=sys.stderr, flush=True)

    stop = threading.Event()
    load_started = time.monotonic()
    run_due(load_started)  # steps at 0s happen before the first pod exists

    def timeline() -> None:
        while not stop.is_set() and pending:
            run_due(load_started)
            stop.wait(0.2)

    runner = threading.Thread(target=timeline, daemon=True)
    runner.start()
    try:
        if say:
            print(f"  creating {ls.count} pods at {ls.rate:g}/s for {scheduler}", file=sys.stderr, flush=True)
        loaded = load.create_pods(target.kube, ls, progress=say)
        result.load = loaded.as_dict()
        sampler.events.append({"t": round(time.monotonic() - t0, 2), "event": "load-done"})

        with Progress("settling", ls.count, enabled=say) as bar:
            def tick(snap: check.Snapshot) -> None:
                mine = [p for p in snap.pods if p["metadata"].get("labels", {}).get(load.LOAD_LABEL) == ls.run_id]
                bound = sum(1 for p in mine if p["spec"].get("nodeName"))
                bar.update(bound, len(mine) or ls.count, f"bound, {time.monotonic() - t0:.0f}s into the run")

            done = check.all_bound(ls.namespace, load.LOAD_LABEL)
            with target.kube.client() as api:
                snap, quiet = check.wait_quiet(lambda: check.fetch(api, target.yunikorn), spec.settle.quiet,
                                               spec.settle.timeout, tick, done)
    finally:  # the threads end with the run, however it ends
        stop.set()
        runner.join(5)
        sampler.stop.set()
        sampler.join(10)
    report = check.evaluate(snap, {SCHEDULER_NAMES[scheduler]}, spec.settle.grace)
    report.quiet = quiet
    result.check = report.as_dict()
    result.table = check.render(report)
    result.report = report
    result.samples, result.events = sampler.samples, sampler.events
    result.binds = bind_outcomes(result, report.as_dict())
    result.met = meets(report, expect)
    result.seconds = round(time.monotonic() - t0, 1)
    if clean:  # the namespace goes (in `default` and other system namespaces, the run's pods)
        with target.kube.client() as api:
            load.clean(api, ls.namespace, None if ls.namespace not in SYSTEM_NAMESPACES else ls.run_id)
    return result


def run_local(scenario: Scenario, scheduler: str, seed: int, state_dir: Path, profiles_dir: Path,
              say: bool = True, yunikorn_patch: Path | None = None, yunikorn_source: Path | None = None) -> RunResult:
    """Bring up the local control plane with the proxy and this scheduler, run, tear down (a
    YuniKorn run uses the patched or source-tree build, if given)."""
    yk = scheduler == "yunikorn"
    c: Cluster = up(Options(state_dir=state_dir, nodes=scenario.spec.cluster.nodes, scheduler=scheduler, proxy=True,
                            profiles_dir=profiles_dir, yunikorn_patch=yunikorn_patch if yk else None,
                            yunikorn_source=yunikorn_source if yk else None))
    try:
        return run_on(Target(c.admin_api(), c.state["proxy"]["control"], c.state.get("yunikorn")), scenario, scheduler,
                      seed, say, c.state.get("schedulerBuild"), c.state.get("schedulerVariant"),
                      clean=False)  # the whole control plane goes
    finally:
        down(c.dir)
        # Logs, journal and kubeconfigs stay for a post-mortem; the run's etcd data (~70 MB) goes.
        shutil.rmtree(c.dir / "etcd", ignore_errors=True)
