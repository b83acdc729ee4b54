"""A scenario run's timeline: the Sampler (the load's pods, Binding outcomes and journal events, once a second)
and the Timeline that performs the scenario's steps, each once it is due."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import httpx
from lightkube import Client

from kube_fault_proxy.kube.kubeapi import ApiError, HTTPError, Pod, TransportError
from kube_fault_proxy.proxy.control.client import ControlClient, ControlError
from kube_fault_proxy.rig.actions import node_churn, pod_churn
from kube_fault_proxy.rig.actions.apiserver_kill import kill_and_restart
from kube_fault_proxy.rig.actions.scheduler_kill import kill_and_restart_all, kill_plan, restarted_within
from kube_fault_proxy.rig.actions.scheduler_stop import stop_and_restart_scheduler
from kube_fault_proxy.rig.cluster.record import ClusterError
from kube_fault_proxy.rig.invariants.pod_scheduled import condition
from kube_fault_proxy.rig.runs.journal_tail import JournalTail
from kube_fault_proxy.rig.runs.run_record import RunResult, Target
from kube_fault_proxy.rig.runs.scenario import Step
from kube_fault_proxy.rig.runs.triggers import FIRED, FaultRecords, binds_succeeded
from kube_fault_proxy.rig.workloads import load

# Node and pod steps (rig/actions/node_churn.py, pod_churn.py): performed on the timeline's own connection.
CHURN = frozenset(("deleteNode", "restoreNode", "flapNode", "cordonNode", "uncordonNode", "resizeNode",
                   "createForeignPods", "terminateForeignPods", "deletePod"))


# Journal events a step may wait for that the timeline reads itself, at once: a crashPoint rule's held commit,
# and the first injection of any rule (a marker rule's, such as binds-answered-200's: the outage's moment).
# The fault records a search trial's actions wait for too (rig/runs/triggers.py).
TAILED = FIRED


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
            # the bind latency histogram at the start and at the last sample: the run's binds are the difference
            self.latency_first: dict[str, Any] | None = control.stats().get("bindLatency")
        self.latency_last: dict[str, Any] | None = None

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
        self.latency_last = stats.get("bindLatency", self.latency_last)
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
        # One sample more, of the settled run: a wave that binds within a second of the last sample would
        # otherwise end the samples short of it (the settle ended on every pod bound, the samples never saw it).
        if not self.is_alive():
            with contextlib.suppress(httpx.HTTPError, ControlError, HTTPError, KeyError), \
                    self.target.kube.client() as api, ControlClient(self.target.control) as control:
                self.sample(api, control)


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
        self.killing = False  # a kill or stop step is under way: the exit waits for its restart
        # onEvent crash-point and inject are read from the journal here (its file, on the local control plane),
        # not once a second by the sampler: the scheduler is killed within a poll of the commit whose answer the
        # proxy holds, the apiserver within a poll of the injection that marks the moment.
        tailed = any(s.onEvent in TAILED for s in steps)
        path = target.cluster.journal if target.cluster is not None else None
        self.journal = FaultRecords(JournalTail(target.control, sampler.cursor, path)) if tailed else None
        self.journal_seen: dict[str, float] = {}  # event -> when (seconds since t0) the proxy wrote its first record
        self.journal_first: dict[str, dict[str, Any]] = {}  # event -> its first record (a held Binding's pod, node)
        self.scheduler_down = False  # a killScheduler or stopScheduler step is under way
        self.churn = node_churn.NodeChurn(lambda: target.kube.client())  # its own connection, opened at first use

    def scheduler_settling(self, quiet: float) -> bool:
        """Whether a killScheduler or stopScheduler step is under way, or still to come at a time or a bind count
        (it will come; an onEvent one may never), or its scheduler restarted less than `quiet` ago: the restarted
        scheduler's view (the allocations it recovers, its queues' books) has not settled yet, even if every pod
        is bound."""
        if self.scheduler_down or self.churning or any(
                s.onEvent is None and (s.killScheduler is not None or s.stopScheduler is not None
                                       or set(s.actions()) & CHURN)
                for s in list(self.pending)):
            return True
        now = time.monotonic() - self.sampler.t0
        return restarted_within(self.sampler.events, now, quiet) or (
            self.last_churn is not None and now < self.last_churn + quiet)

    def _binds(self) -> int:
        with ControlClient(self.target.control) as control:
            return binds_succeeded(control.stats()["bindsTotal"])

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
            self.journal.read()
            for name, r in self.journal.by_event.items():
                if name not in self.journal_seen:
                    self.journal_seen[name] = journal_event(r, read_at, self.sampler.wall0)["t"]
                    self.journal_first[name] = r
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
                    # onEvent crash-point: the components its record names (a correlated crash), else the scheduler
                    plan = kill_plan(self.journal_first.get("crash-point") if step.onEvent == "crash-point" else None,
                                     step.killScheduler.restartAfter)
                    what = kill_and_restart_all(self.target.cluster, plan, lambda: time.monotonic() - self.sampler.t0,
                                                self.sampler.events, self.stop)
                elif step.stopScheduler is not None:
                    self.killing = self.scheduler_down = True
                    g = step.stopScheduler
                    what = stop_and_restart_scheduler(self.target.cluster, g.signal, g.within, g.restartAfter,
                                                      lambda: time.monotonic() - self.sampler.t0,
                                                      self.sampler.events, self.stop, self.pending_conditions())
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
            killed = step.killApiserver is not None or step.killScheduler is not None or step.stopScheduler is not None
            t = (began if killed else time.monotonic()) - self.sampler.t0
            self.result.steps.append({"t": round(t, 2), "did": what})
            if self.say:
                print(f"  [{t:5.1f}s] {what}", file=sys.stderr, flush=True)

    def pending_conditions(self) -> dict[str, int]:
        """The load's pods as the apiserver has them now (read directly, not through the proxy): how many are
        pending and unbound (`pendingPods`), and how many of those carry the PodScheduled=False condition a
        scheduler writes on a pod it cannot place (`pendingWithCondition`). Empty if the read fails: the stop
        goes on."""
        try:
            with self.target.kube.client() as api:
                pods = list(api.list(Pod, namespace=self.ls.namespace, labels={load.LOAD_LABEL: self.ls.run_id}))
        except (httpx.HTTPError, HTTPError, TransportError, ApiError):
            return {}
        return pending_counts(pods)

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


def pending_counts(pods: Sequence[Any]) -> dict[str, int]:
    """Of these pods, the unbound Pending ones, and those of them with PodScheduled=False (any reason)."""
    pending = [p for p in pods if not p["spec"].get("nodeName") and p["status"].get("phase") == "Pending"]
    told = [p for p in pending if (condition(p, "PodScheduled") or {}).get("status") == "False"]
    return {"pendingPods": len(pending), "pendingWithCondition": len(told)}


def retry_transport(call: Any, attempts: int = 3) -> Any:
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
        pods = retry_transport(lambda: list(api.list(Pod, namespace=namespace, labels={load.LOAD_LABEL: run_id})))
        for n, p in enumerate(pods):
            if stop is not None and stop.is_set():
                return f"touched {n} of {len(pods)} pods (stopped: the run had ended)"
            retry_transport(lambda name=p["metadata"]["name"]: load.touch_pod(api, name, namespace))
    return f"touched {len(pods)} pods"
