"""One search trial on a control plane that stays up between trials (etcd, kube-apiserver, the
proxy and the scheduler): a fresh namespace, the genome's profile, a small load, quiescence read
from the proxy's own counters and the cluster, the workload action, the namespace's invariants."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from lightkube.types import PatchType

from kube_fault_proxy.kube.kubeapi import ApiError, HTTPError, Node, Pod, ensure_namespace
from kube_fault_proxy.proxy.control.client import ControlClient, ControlError
from kube_fault_proxy.rig.actions import node_churn, trial_churn, trial_runner
from kube_fault_proxy.rig.actions.scheduler_kill import CrashPoints, restarted_within
from kube_fault_proxy.rig.cluster import controller_manager, versions
from kube_fault_proxy.rig.cluster.control_plane import Options, running
from kube_fault_proxy.rig.cluster.feature_gates import collect as feature_gates_of
from kube_fault_proxy.rig.cluster.record import Cluster, ClusterError
from kube_fault_proxy.rig.cluster.schedulers import restart_scheduler
from kube_fault_proxy.rig.controllers.apiserver import Recorder
from kube_fault_proxy.rig.invariants import check, devices, gangs, ledger, pod_scheduled, pod_waits
from kube_fault_proxy.rig.invariants.history import History
from kube_fault_proxy.rig.runs.journal_tail import JournalTail
from kube_fault_proxy.rig.runs.runner import SCHEDULER_NAMES
from kube_fault_proxy.rig.runs.timeline import timeline_sample
from kube_fault_proxy.rig.runs.triggers import FaultRecords
from kube_fault_proxy.rig.search import controller_trial, differential
from kube_fault_proxy.rig.search.controller_trial import CONTROLLER_MANAGER, WORKLOAD_KINDS, ControllerTrial
from kube_fault_proxy.rig.search.excused import judge_trial
from kube_fault_proxy.rig.search.genome import Genome, fault_kind
from kube_fault_proxy.rig.search.kinds import EVENT_EDITORS, event_lag, traits
from kube_fault_proxy.rig.workloads import dra, gang, load, shapes

LOAD_RATE = 200.0
VIOLATIONS_KEPT = 5  # a trial's first violations, as messages, in trials.jsonl (what a record quotes)
CRASH_RESTART_AFTER = 1.0  # a crash point: the scheduler is killed, and started again this much later
LATE_AFTER = 2.0  # gang-late: its nodes come this long after the load is in (seconds)
PROBE_BOUND = 30.0  # the gang shape: a probe pod created once the trial settled must be bound this soon (seconds)


@dataclass
class Tier:
    """How long a trial waits: the search tier is fast, the confirmation tier patient."""

    name: str
    quiet: float = 4.0  # nothing changed (cluster, scheduler, proxy counters) for this long
    timeout: float = 45.0  # per phase (faulted load, then after the faults are switched off)


# The control must outwait kube-scheduler's retry of a failed bind (backoff up to 10 s, and the
# 20 s flush of unschedulable pods the rig configures) before a Pending pod counts as stranded.
SEARCH, CONFIRM, CONTROL = Tier("search", 4.0, 45.0), Tier("confirm", 8.0, 90.0), Tier("control", 25.0, 120.0)
CANARY = Tier("canary", 4.0, 45.0)  # a fault-free trial at the search tier's pace
PATIENT = Tier("confirm-patient", 25.0, 120.0)  # a replay on kube-scheduler: the control's patience


def confirm_tier(scheduler: str) -> Tier:
    """A replay's tier (the search's own and `search replay`'s): 8 s of quiet; kube-scheduler as the target is
    given the control's 25 s, longer than its bind retry (backoff up to 10 s, the 20 s flush of unschedulable
    pods), so a pod it would still retry is not counted as stranded."""
    return PATIENT if scheduler == "kube-scheduler" else CONFIRM


@dataclass
class Rig:
    """A local control plane with the proxy and the target, reused by every trial: a scheduler through the proxy,
    or kube-controller-manager's workload controllers through it (kube-scheduler direct)."""

    cluster: Cluster
    scheduler: str  # the target: yunikorn, kube-scheduler or kube-controller-manager
    trials: int = 0
    cursor: int = 0  # the proxy journal's last record seen
    schedulable: int | None = None  # nodes left schedulable (the rest cordoned); None: every node
    cordoned: dict[str, float] = field(default_factory=dict)  # node -> when the rig knew it cordoned (epoch s)
    shaped: tuple[shapes.NodeSpec, ...] = ()  # the node specs last applied to the first nodes (by name)
    kinds: tuple[str, ...] = WORKLOAD_KINDS  # kube-controller-manager as the target: the workload kinds a trial makes
    # A trial's node and pod churn whose undoing failed at its clean-up: undone before the next trial starts.
    unrestored: trial_churn.TrialChurn | None = None

    @classmethod
    @contextlib.contextmanager
    def running(cls, state_dir: Path, scheduler: str, nodes: int, profiles_dir: Path,
                yunikorn_patch: Path | None = None, yunikorn_source: Path | None = None,
                feature_gates: Mapping[str, Mapping[str, bool]] | None = None,
                kinds: tuple[str, ...] = WORKLOAD_KINDS, kubernetes: str = versions.KUBERNETES,
                devices: bool = False, gangs: bool = False,
                kube_scheduler_patch: Path | None = None) -> Iterator[Rig]:
        """The control plane up for the block (raises ClusterError), down after it; a YuniKorn rig may run a
        patched or source build, a kube-scheduler rig a patched build (each rig ignores the other scheduler's
        patch, and a kube-controller-manager rig runs kube-scheduler as released); kube-scheduler's gates go only to a
        kube-scheduler rig, the other components' to every rig. A kube-controller-manager rig runs its workload
        controllers through the proxy and kube-scheduler direct. Every component but YuniKorn is of the
        Kubernetes release `kubernetes`. With `devices` (a device shape may be drawn) kube-controller-manager
        also runs the resourceclaim-controller, which makes a pod's claims from its templates. With `gangs` (the
        gang shape may be drawn) `GenericWorkload` is on in every component unless `feature_gates` says otherwise
        (a control by gates), the v1beta1 scheduling API is served, and the podgroup-protection-controller runs."""
        patch, source = (yunikorn_patch, yunikorn_source) if scheduler == "yunikorn" else (None, None)
        own = kube_scheduler_patch if scheduler == "kube-scheduler" else None
        wanted = {part: dict(g) for part, g in (feature_gates or {}).items()}
        if gangs:
            for part, g in feature_gates_of(gang.GATES).items():
                wanted[part] = {**g, **wanted.get(part, {})}
        gates = {part: g for part, g in wanted.items() if part != "kube-scheduler" or scheduler == part}
        extra: dict[str, Any] = {}
        if scheduler == CONTROLLER_MANAGER:
            extra = {"through_proxy": (CONTROLLER_MANAGER,),
                     "controllers": controller_manager.CONTROLLERS + controller_manager.WORKLOAD_CONTROLLERS}
        if devices:
            extra["controllers"] = (*extra.get("controllers", controller_manager.CONTROLLERS), *dra.CONTROLLERS)
        if gangs:
            extra["controllers"] = (*extra.get("controllers", controller_manager.CONTROLLERS), *gang.CONTROLLERS)
            extra["runtime_config"] = (gang.RUNTIME_CONFIG,)
        with running(Options(state_dir=state_dir, nodes=nodes,
                             scheduler="kube-scheduler" if scheduler == CONTROLLER_MANAGER else scheduler, proxy=True,
                             profiles_dir=profiles_dir, yunikorn_patch=patch, yunikorn_source=source,
                             kube_scheduler_patch=own,
                             feature_gates=gates, kubernetes=kubernetes, **extra)) as c:
            yield cls(c, scheduler, shaped=(shapes.ROOMY_NODE,) * nodes, kinds=kinds)  # the default NodeShape

    @property
    def build(self) -> str:
        """The target's exact build (with its gates), as `cluster status` names it."""
        if self.scheduler == CONTROLLER_MANAGER:
            return self.cluster.targets.get(CONTROLLER_MANAGER) or CONTROLLER_MANAGER
        return self.cluster.scheduler_build or self.scheduler

    @property
    def control(self) -> str:
        """The proxy's control plane URL."""
        return self.cluster.control_url

    @property
    def yunikorn(self) -> str | None:
        """YuniKorn's REST API, when the scheduler is YuniKorn."""
        return self.cluster.yunikorn_url


@dataclass
class TrialSnapshot(check.Snapshot):
    """A cluster snapshot plus the proxy's own counters, so quiet means quiet on the wire too."""

    proxy: tuple[Any, ...] = ()

    def signature(self) -> tuple[Any, ...]:
        """The cluster's signature and the proxy's bind and injection counters."""
        return (*super().signature(), *self.proxy)


@dataclass
class TrialResult:
    """What one trial showed."""

    name: str
    scheduler: str
    genome: Genome
    broken: list[str] = field(default_factory=list)
    check: dict[str, Any] = field(default_factory=dict)
    injections: int = 0
    fired: set[str] = field(default_factory=set)  # the rules that injected at least once
    near_miss: int = 0  # peak of (allocations - bound pods) in the trial's namespace
    tokens: set[str] = field(default_factory=set)  # per-pod sequences and phase events: novelty
    history: dict[str, list[str]] = field(default_factory=dict)  # pod -> what the journal says happened to it
    seconds: float = 0.0
    restart_seconds: float = 0.0  # of the seconds: starting a fresh scheduler
    own_effect: str | None = None  # why the ledger excuses every break: the fault's own effect (excused.py)
    effects: ledger.Ledger = field(default_factory=ledger.Ledger)  # what the journal says the faults did
    end_state: dict[str, Any] = field(default_factory=dict)  # the end state as facts (differential.py)
    diverged: list[str] = field(default_factory=list)  # how the end state differs from clean runs', beyond the mask
    quiet: bool = True
    error: str | None = None
    actions_done: int = 0  # trial actions performed (the genome's churn; not those whose count never came)
    # For the timeline picture (report.timeline_svg): once-a-poll samples, fault windows, steps.
    samples: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    # A recorded trial (a planned search's reference run): the direct watch's history, the journal's records of the
    # trial, its workload phases (name, start epoch s) and when its faults were switched off (epoch s).
    recorded: History | None = None
    journal: list[dict[str, Any]] | None = None
    phases: list[tuple[str, float]] = field(default_factory=list)
    faults_end: float | None = None

    def mark_phases(self, wall0: float, faults_end: float | None) -> None:
        """The workload phases of a recorded trial: `load` from its start, then one per step (`2:touched`, ...)."""
        self.phases = [("load", wall0)] + [(f"{i}:{str(st['did']).split(' ', 1)[0]}", wall0 + float(st["t"]))
                                           for i, st in enumerate(self.steps, 1) if st.get("did")]
        self.faults_end = faults_end

    @property
    def hit(self) -> bool:
        """An invariant broke."""
        return bool(self.broken)

    def as_dict(self) -> dict[str, Any]:
        """JSON form (one line of trials.jsonl)."""
        return {"name": self.name, "scheduler": self.scheduler, "origin": self.genome.origin,
                "genome": self.genome.canonical(), "digest": self.genome.digest(), "broken": self.broken,
                "counts": self.check.get("counts", {}), "injections": self.injections,
                "fired": sorted(self.fired), "nearMiss": self.near_miss,
                "seconds": round(self.seconds, 1),
                "restartSeconds": round(self.restart_seconds, 1), "quiet": self.quiet, "error": self.error,
                "tokens": sorted(self.tokens), "ownEffect": self.own_effect, "ledger": self.check.get("ledger"),
                "endState": self.end_state, "diverged": self.diverged,
                "steps": [str(st["did"]) for st in self.steps], "actionsDone": self.actions_done,
                "violations": [v["message"] for v in (self.check.get("violations") or [])[:VIOLATIONS_KEPT]]}

    @classmethod
    def from_dict(cls, doc: dict[str, Any], genome: Genome) -> TrialResult:
        """A trials.jsonl line back (what a resumed search needs; samples and histories are not kept)."""
        return cls(str(doc["name"]), str(doc["scheduler"]), genome, broken=list(doc["broken"]),
                   check={"counts": doc.get("counts", {}), "ledger": doc.get("ledger")},
                   injections=int(doc["injections"]),
                   fired=set(doc.get("fired", [])), near_miss=int(doc.get("nearMiss", 0)),
                   tokens=set(doc.get("tokens", [])), seconds=float(doc.get("seconds", 0.0)),
                   restart_seconds=float(doc.get("restartSeconds", 0.0)), quiet=bool(doc.get("quiet", True)),
                   error=doc.get("error"), own_effect=doc.get("ownEffect"), end_state=dict(doc.get("endState") or {}),
                   diverged=list(doc.get("diverged") or []), actions_done=int(doc.get("actionsDone", 0)))


def _in_namespace(snap: check.Snapshot, namespace: str) -> tuple[int, int]:
    """(allocations, bound pods) in one namespace."""
    bound = sum(1 for p in snap.pods if p["metadata"].get("namespace") == namespace and p["spec"].get("nodeName"))
    allocs = 0
    if snap.yunikorn is not None:
        for app in snap.yunikorn["apps"]:
            for a in app.get("allocations") or []:
                if (a.get("allocationTags") or {}).get("kubernetes.io/meta/namespace") == namespace:
                    allocs += 1
    return allocs, bound


def _fetch(api: Any, yunikorn: str | None, attempts: int = 20) -> check.Snapshot:
    """A snapshot; YuniKorn's REST API answers errors for a moment after a restart, so retry."""
    for _ in range(attempts):
        snap = check.fetch(api, yunikorn)
        yk = snap.yunikorn
        if yk is None or (isinstance(yk["apps"], list) and isinstance(yk["queues"], dict)
                          and all(isinstance(a, dict) for a in yk["apps"])):
            return snap
        time.sleep(0.5)
    raise ValueError(f"YuniKorn's REST API at {yunikorn} did not answer a partition")


def set_schedulable(api: Any, keep: int | None, cordoned: dict[str, float] | None = None) -> int:
    """Cordon every node but the first `keep` by name (None: uncordon all), as `kubectl cordon`
    does; returns how many nodes are schedulable now. `cordoned` (if given) keeps, per cordoned
    node, a moment by which it was cordoned (for no-bind-to-cordoned-node)."""
    nodes = sorted(api.list(Node), key=lambda n: n["metadata"]["name"])
    times = {} if cordoned is None else cordoned
    for i, node in enumerate(nodes):
        name, cordon = node["metadata"]["name"], keep is not None and i >= keep
        if bool((node.get("spec") or {}).get("unschedulable")) != cordon:
            api.patch(Node, name, {"spec": {"unschedulable": cordon or None}}, patch_type=PatchType.MERGE)
            times.pop(name, None)
        if cordon:
            times.setdefault(name, time.time())  # after the patch: it is cordoned by now
        else:
            times.pop(name, None)
    return len(nodes) if keep is None else min(keep, len(nodes))


def fired_rules(records: list[dict[str, Any]]) -> set[str]:
    """The rules that injected (an `inject` record); a rule editing watch events, once it edited one."""
    edited = {str(r["rule"]) for r in records if r["event"] == "watch-event" and r.get("rule")}
    return {str(r["rule"]) for r in records if r["event"] == "inject" and r.get("rule")
            and (r.get("fault") not in EVENT_EDITORS or r["rule"] in edited)}


def _history(records: list[dict[str, Any]], namespace: str) -> tuple[dict[str, list[str]], set[str]]:
    """Per pod, the collapsed sequence of faulted requests and watch-event edits the journal recorded
    in this trial; and the global phase events (outage, relist-forcing faults)."""
    per_pod: dict[str, list[str]] = {}
    phases: set[str] = set()
    for r in records:
        req = r.get("request") or {}
        if r["event"] == "inject":
            sub = f"/{req['subresource']}" if req.get("subresource") else ""
            step = f"{req.get('verb')} {req.get('resource')}{sub} -> {r.get('fault')} ({r.get('action')})"
            if req.get("resource") == "pods" and req.get("name") and req.get("namespace") == namespace:
                seq = per_pod.setdefault(req["name"], [])
                if not seq or seq[-1] != step:
                    seq.append(step)
            else:
                phases.add(f"{req.get('verb')} {req.get('resource')} -> {r.get('fault')}")
        elif r["event"] == "watch-event":
            step = f"watch {r.get('kind', '?')} {r.get('type', '?')} -> {r.get('action', 'edited')}"
            if r.get("kind") == "Pod" and r.get("namespace") == namespace and r.get("name"):
                seq = per_pod.setdefault(str(r["name"]), [])
                if not seq or seq[-1] != step:
                    seq.append(step)
            else:
                phases.add(step)
        elif r["event"] in ("outage-start", "outage-end", "upstream-lost", "crash-point"):
            phases.add(r["event"])
    return per_pod, phases


def read_journal(rig: Rig, control: ControlClient, result: TrialResult, namespace: str, wall0: float,
                 final: Mapping[str, str]) -> None:
    """What the proxy's journal says of the trial: its injections, the rules that fired, outages on the timeline,
    each pod's history, and the novelty tokens (each pod's history ending in its `final` state, the phase events,
    the invariants broken)."""
    page = control.journal_after(rig.cursor)
    rig.cursor, records = page.next, page.records
    if result.journal is not None:  # a recorded trial keeps them
        result.journal = list(records)
    result.injections = sum(1 for r in records if r["event"] == "inject")
    result.fired = fired_rules(records)
    result.events += [{"event": r["event"], "t": round(float(r["time"]) - wall0, 2)} for r in records
                      if r["event"] in ("outage-start", "outage-end")]
    result.events.sort(key=lambda e: float(e["t"]))
    result.history, phases = _history(records, namespace)
    result.effects = ledger.read(records, "the proxy's journal").in_namespace(namespace)
    result.tokens = phases | {" · ".join([*seq, final.get(pod, "deleted")]) for pod, seq in result.history.items()}
    result.tokens |= {f"broken:{b}" for b in result.broken}


class _Trial:
    """One trial's phases over one control-plane connection and one apiserver client, sharing its result."""

    def __init__(self, rig: Rig, genome: Genome, name: str, tier: Tier, control: ControlClient, api: Any,
                 record: bool = False) -> None:
        self.rig, self.genome, self.tier, self.control, self.api = rig, genome, tier, control, api
        self.record = record
        rig.trials += 1
        self.namespace = f"s-{name}-{rig.trials}"[:63].rstrip("-")
        self.profile = f"search-{name}"[:63].rstrip("-")
        self.scheduler_name = SCHEDULER_NAMES[rig.scheduler]
        self.result = TrialResult(name, rig.scheduler, genome)
        self.wall0 = time.time()
        self.faults_end: float | None = None  # when every fault was switched off (epoch s)
        self.workload: shapes.Workload | None = None
        self.crashes: CrashPoints | None = None
        self.churn: trial_churn.TrialChurn | None = None  # the genome's trial actions: what they did, to undo
        self.runner: trial_runner.Runner | None = None
        self.late: node_churn.NodeChurn | None = None  # gang-late: the nodes gone until the load is in
        self.binds_seen: dict[str, Any] = {}  # the proxy's bindsTotal at the last snapshot

    def step(self, what: str) -> None:
        """A step of the trial (an action done, something undone), at its time."""
        self.result.steps.append({"t": round(time.time() - self.wall0, 2), "did": what})

    def prepare(self) -> None:
        """The nodes the genome asks for, then a fresh scheduler: nothing an earlier trial's faults left in its
        cache or its informers' backoff leaks into this one (cordoned before the restart, so it lists them so). An
        earlier trial's churn whose undoing failed is undone first (ValueError, ApiError if it fails again)."""
        if self.rig.unrestored is not None:
            left, self.rig.unrestored = self.rig.unrestored, None
            try:
                for what in left.undo():
                    self.step(f"an earlier trial's action undone: {what}")
            except (ApiError, HTTPError, ValueError):
                self.rig.unrestored = left
                raise
        if self.genome.nodes != self.rig.schedulable:
            set_schedulable(self.api, self.genome.nodes, self.rig.cordoned)
            self.rig.schedulable = self.genome.nodes
        count = self.genome.nodes or len(list(self.api.list(Node)))
        self.workload = shapes.generate(self.genome.shape, count, self.genome.pods, self.genome.seed)
        if self.workload.nodes != self.rig.shaped:
            load.shape_nodes(self.api, self.workload.nodes)
            self.rig.shaped = self.workload.nodes
        if self.workload.gangs:  # the gang shape's PodGroups, before any member
            ensure_namespace(self.api, self.namespace)
            gang.create_groups(self.api, self.namespace, self.workload.gangs)
        if self.workload.late_nodes:  # gang-late: its last nodes gone before the scheduler starts again
            self.late = node_churn.NodeChurn(lambda: self.rig.cluster.admin_api().client())
            names = sorted(n["metadata"]["name"] for n in self.api.list(Node))[:len(self.workload.nodes)]
            for name in names[-self.workload.late_nodes:]:
                self.step(f"late: {self.late.delete(name)}")
        if self.genome.shape in shapes.DEVICE_SHAPES:  # this trial's devices on the first nodes, its templates
            names = sorted(n["metadata"]["name"] for n in self.api.list(Node))[:len(self.workload.nodes)]
            dra.publish(self.api, names, [n.devices for n in self.workload.nodes], [self.namespace],
                        binding_conditions=self.genome.shape in shapes.BINDING_SHAPES)
        self.result.restart_seconds = restart_scheduler(self.rig.cluster)
        self.rig.cursor = self.control.journal_after(self.rig.cursor).next  # skip what came before this trial

    def activate(self) -> None:
        """Upload the genome's profile and switch it on (a canary's, with no rules, is never switched on)."""
        if self.genome.rules:
            self.control.activate(self.genome.document(self.profile), self.genome.seed)
        self.wall0 = time.time()
        self.result.events.append({"event": "activate", "t": 0.0, "profile": self.profile})

    @contextlib.contextmanager
    def crash_points(self) -> Iterator[None]:
        """With a rule whose kind needs the target killed (a crash point): for the block, the scheduler killed
        (kill -9) and started again on each crash point the proxy journals (in the trial's events and steps)."""
        if not any("kill" in traits(fault_kind(r)).trial_needs for r in self.genome.rules):
            yield
            return
        with CrashPoints(self.rig.cluster, self.rig.control, CRASH_RESTART_AFTER, lambda: time.time() - self.wall0,
                         self.result.events, self.result.steps) as self.crashes:
            yield

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """With `record`: for the block, the trial's pods and the nodes watched straight from the apiserver."""
        if not self.record:
            yield
            return
        self.result.journal = []
        with Recorder(self.rig.cluster.admin_api(), [self.namespace], resources={"Pod": Pod, "Node": Node}) as rec:
            yield
        self.result.recorded = rec.history
        self.result.mark_phases(self.wall0, self.faults_end)

    @contextlib.contextmanager
    def driver(self) -> Iterator[None]:
        """For a shape whose devices wait for binding conditions: the rig's fake DRA driver for the block, straight
        to the apiserver (it is the driver, not the target), setting the trial's allocated devices Ready."""
        if self.genome.shape not in shapes.BINDING_SHAPES:
            yield
            return
        with dra.Driver(self.rig.cluster.admin_api(), [self.namespace]) as driver:
            yield
        self.result.steps.append({"t": round(time.time() - self.wall0, 2),
                                  "did": f"fake DRA driver set {driver.written} claims' devices Ready "
                                         f"({driver.errors} passes failed)"})

    def take(self) -> TrialSnapshot:
        """A snapshot with the proxy's counters (so quiet means quiet on the wire too), and a timeline sample."""
        if self.crashes is not None:
            self.crashes.idle()  # a killed scheduler is back (YuniKorn's REST API answers again)
        try:
            snap = _fetch(self.api, self.rig.yunikorn)
        except httpx.TransportError:
            if self.crashes is None:
                raise
            time.sleep(0.5)  # a crash point read after this snapshot began: its restart first
            self.crashes.idle()
            snap = _fetch(self.api, self.rig.yunikorn)
        stats = self.control.stats()
        mine = [p for p in snap.pods if p["metadata"].get("namespace") == self.namespace]
        self.result.samples.append(timeline_sample(round(time.time() - self.wall0, 2), mine, stats))
        binds = stats["bindsTotal"]
        sig = (binds["succeeded"], binds["throttled"], binds["failed"], stats["injectionsTotal"],
               tuple(sorted(stats.get("events", {}).items())))
        self.binds_seen = dict(binds)
        lost = self.churn.lost if self.churn is not None else {}
        return TrialSnapshot(snap.pods, snap.nodes, snap.now, snap.yunikorn, dict(self.rig.cordoned), lost,
                             proxy=(*sig, len(self.result.steps)))

    def tick(self, snap: check.Snapshot) -> None:
        """The near miss: the peak of allocations over bound pods in the trial's namespace."""
        allocs, bound = _in_namespace(snap, self.namespace)
        self.result.near_miss = max(self.result.near_miss, allocs - bound)

    def settling(self) -> bool:
        """Whether a crash point's kill and restart are under way, or the restarted scheduler started less than the
        tier's quiet time ago: its view (the allocations it recovers, its queues' books) has not settled yet, even
        if every pod is bound (the scenario runner's rule after a killScheduler step)."""
        if self.runner is not None and self.runner.settling(self.tier.quiet, self.binds_seen or None):
            return True
        if self.crashes is None:
            return False
        if self.crashes.busy.locked():
            return True
        return restarted_within(self.result.events, time.time() - self.wall0, self.tier.quiet)

    def settle(self, done: Callable[[check.Snapshot], bool]) -> tuple[check.Snapshot, bool]:
        """Wait until every pod is bound (and a restarted scheduler has had the quiet time) or nothing changes for
        the tier's quiet time."""
        # While the profile is on, a watch a rule edits may keep an event back: quiet means past the longest it keeps
        # one, or a pod it held is judged stranded while its event is still on the way (switched off, it releases).
        quiet = max(self.tier.quiet, event_lag(self.genome.rules) + 1.0)
        return check.wait_quiet(self.take, quiet, self.tier.timeout, self.tick,
                                lambda snap: done(snap) and not self.settling())

    def load_and_settle(self) -> check.Snapshot:
        """The load, the workload action, every fault off, and the cluster settled again."""
        shaped = self.workload.pods if self.workload is not None and self.genome.shape != "roomy" else ()
        spec = load.LoadSpec(count=self.genome.pods, rate=LOAD_RATE, concurrency=8, namespace=self.namespace,
                             scheduler_name=self.scheduler_name, timeout=60, pods=shaped)
        self.take()
        done = check.all_bound(self.namespace, load.LOAD_LABEL)
        with self.acting():  # the trial actions, during the faulted load only
            load.create_pods(self.rig.cluster.admin_api(), spec, progress=False)
            self.nodes_come()
            _, quiet1 = self.settle(done)
        if self.genome.action is not None:
            self.result.steps.append({"t": round(time.time() - self.wall0, 2),
                                      "did": load.act_on_pods(self.api, self.genome.action, self.namespace)})
        self.control.deactivate()  # every fault is over before the check
        self.faults_end = time.time()
        self.result.events.append({"event": "deactivate", "t": round(time.time() - self.wall0, 2)})
        snap, quiet2 = self.settle(done)
        self.result.quiet = quiet1 and quiet2
        return snap

    def nodes_come(self) -> None:
        """gang-late: LATE_AFTER seconds after the load is in (the scheduler has found no room for the members
        planned there), its nodes created again as they were, while the faults act on what announces them."""
        if self.late is None:
            return
        time.sleep(LATE_AFTER)
        for what in self.late.restore_all():
            self.step(f"late: {what}")

    @contextlib.contextmanager
    def acting(self) -> Iterator[None]:
        """With trial actions in the genome: for the block, each performed once its trigger is reached (the proxy
        has answered its count of Bindings since the start, or journaled the first firing of its fault since the
        start), on the trial's schedulable nodes (by name) and its pods; an action under way when the block ends is
        finished (a flapped node comes back), one not reached is recorded so."""
        if not self.genome.churn:
            yield
            return
        nodes = tuple(sorted(n["metadata"]["name"] for n in self.api.list(Node)
                             if not (n.get("spec") or {}).get("unschedulable")))
        self.churn = trial_churn.TrialChurn(lambda: self.rig.cluster.admin_api().client(), nodes, self.namespace)
        # The journal read as a scenario's timeline reads it: its file on the local control plane, from now.
        faults = FaultRecords(JournalTail(self.rig.control, self.rig.cursor, self.rig.cluster.journal))
        with ControlClient(self.rig.control, timeout=15) as stats:  # the runner's own connection
            self.runner = trial_runner.Runner(self.genome.churn, self.genome.pods,
                                             lambda: dict(stats.stats()["bindsTotal"]),
                                             self.churn.perform, self.step, faults)
            self.runner.start()
            try:
                yield
            except BaseException:
                self.runner.finish(abort=True)
                self.result.actions_done = self.runner.done
                raise
            self.runner.finish()
            self.result.actions_done = self.runner.done

    def judge(self, snap: check.Snapshot) -> None:
        """The invariants in the trial's namespace, and what the journal says the faults did (novelty tokens)."""
        result = self.result
        report = check.evaluate(snap, {self.scheduler_name}, grace=0, namespace=self.namespace)
        if self.churn is not None:  # a node an action deleted (PodGC's to clean) or gave less cpu
            report.violations, excused = trial_churn.excuse_missing_nodes(report.violations, snap.pods, snap.lost,
                                                                          self.churn.shrunk)
            report.excused += excused
        if self.rig.scheduler == "kube-scheduler":  # what its asynchronous API calls broke upstream (gate on or off)
            mine = [p for p in snap.pods if p["metadata"].get("namespace") == self.namespace]
            report.checked += [pod_scheduled.NAME, pod_waits.NAME]
            report.violations += pod_scheduled.check_scheduled(mine, {self.scheduler_name})
            report.violations += pod_waits.judge_waits(pod_waits.waits_from_pods(mine), {self.scheduler_name},
                                                       self.faults_end or self.wall0, snap.now)
        if self.genome.shape in shapes.DEVICE_SHAPES:  # what DRA promises, on the trial's pods and claims
            report.checked += list(devices.NAMES)
            report.violations += devices.check_devices(
                [p for p in snap.pods if p["metadata"].get("namespace") == self.namespace],
                self.api.list(dra.ResourceClaim, namespace="*"), self.api.list(dra.ResourceSlice), self.namespace)
        if self.genome.shape in shapes.GANG_SHAPES:
            self.judge_gangs(snap, report)
        result.check = report.as_dict()
        result.broken = sorted(n for n, vs in report.by_invariant().items() if vs)
        final = {p["metadata"]["name"]: "bound" if p["spec"].get("nodeName") else "unbound"
                 for p in snap.pods if p["metadata"].get("namespace") == self.namespace}
        read_journal(self.rig, self.control, result, self.namespace, self.wall0, final)
        result.own_effect, result.check["ledger"] = judge_trial(result.check, result.effects, self.genome.action,
                                                                t0=self.wall0)
        result.end_state = {**differential.pod_facts(snap.pods, self.namespace),
                            **differential.yunikorn_facts(snap.yunikorn, self.namespace)}
        if result.tokens and self.genome.shape != "roomy":
            result.tokens.add(f"shape:{self.genome.shape}")

    def judge_gangs(self, snap: check.Snapshot, report: check.Report) -> None:
        """What gang scheduling promises: a pending member of a gang left short of its minCount (a member deleted)
        is not stranded; and a probe pod that fits, created now, is bound within PROBE_BOUND seconds (the
        scheduler is not stuck, as kubernetes#140263 left it after members failed to bind)."""
        mine = [p for p in snap.pods if p["metadata"].get("namespace") == self.namespace]
        groups = list(self.api.list(gang.PodGroup, namespace=self.namespace))
        report.violations, excused = gangs.excuse_short_gangs(report.violations, mine, groups)
        report.excused += excused
        probe, seconds = gang.probe(self.rig.cluster.admin_api(), self.namespace, timeout=PROBE_BOUND,
                                    scheduler_name=self.scheduler_name)
        report.checked.append(gangs.NOT_STUCK)
        report.violations += gangs.not_stuck(f"{self.namespace}/{probe}", seconds, PROBE_BOUND)

    def clean(self) -> None:
        """Pass-through again, the profile gone, the namespace gone (pods and all, by kube-controller-manager), and
        what the trial actions did undone: every node they deleted created again, every cordon and resize undone
        (if that fails, the next trial undoes it before it starts, and this one records the error)."""
        with contextlib.suppress(httpx.HTTPError, ControlError):
            self.control.deactivate()
            self.control.delete_profile(self.profile)
        if self.churn is not None:
            try:
                for what in self.churn.undo():
                    self.step(f"undone: {what}")
            except (ApiError, HTTPError, ValueError) as e:
                self.rig.unrestored = self.churn
                self.result.error = self.result.error or f"undoing the trial actions: {type(e).__name__}: {e}"
        if self.late is not None:  # gang-late's nodes, if the trial ended before they came
            try:
                for what in self.late.restore_all():
                    self.step(f"undone: {what}")
            except (ApiError, HTTPError, ValueError) as e:
                self.result.error = self.result.error or f"creating the late nodes again: {type(e).__name__}: {e}"
            finally:
                self.late.close()
        with contextlib.suppress(ApiError, HTTPError):
            load.clean(self.api, self.namespace)


def run_trial(rig: Rig, genome: Genome, name: str, tier: Tier = SEARCH,
              note: Callable[[str], None] | None = None, record: bool = False) -> TrialResult:
    """Run one trial; never raises for what the scheduler or the faults do (errors are recorded). Anything else
    (an interruption) ends it at once, uncleaned: the control plane is going down. With `record`, the result keeps
    the trial's history (watched straight from the apiserver), its journal records and its phases."""
    t0 = time.monotonic()
    if rig.scheduler == CONTROLLER_MANAGER:
        result = _controller_trial(rig, genome, name, tier, note, record)
        result.seconds = time.monotonic() - t0
        _note(note, result)
        return result
    with ControlClient(rig.control, timeout=15) as control, rig.cluster.admin_api().client() as api:
        trial = _Trial(rig, genome, name, tier, control, api, record)
        result = trial.result
        try:
            trial.prepare()
            with trial.recording(), trial.crash_points(), trial.driver():
                trial.activate()
                snap = trial.load_and_settle()
            trial.judge(snap)
        except (httpx.HTTPError, ControlError, HTTPError, ApiError, KeyError, ValueError, ClusterError) as e:
            result.error = f"{type(e).__name__}: {e}"
        trial.clean()
    result.seconds = time.monotonic() - t0
    _note(note, result)
    return result


def _note(note: Callable[[str], None] | None, result: TrialResult) -> None:
    if note is not None:
        note(f"  {result.name}: {', '.join(result.broken) or 'clean'} ({result.injections} injections, "
             f"{result.seconds:.0f}s){' ERROR ' + result.error if result.error else ''}")


def _controller_trial(rig: Rig, genome: Genome, name: str, tier: Tier,
                      note: Callable[[str], None] | None, record: bool = False) -> TrialResult:
    """A trial of kube-controller-manager's workload controllers (controller_trial.py), its journal read as a
    scheduler trial's is (each pod's final state: live or gone)."""
    rig.trials += 1
    namespace, profile = f"s-{name}-{rig.trials}"[:63].rstrip("-"), f"search-{name}"[:63].rstrip("-")
    result = TrialResult(name, rig.scheduler, genome, journal=[] if record else None)
    with ControlClient(rig.control, timeout=15) as control, rig.cluster.admin_api().client() as api:
        trial = ControllerTrial(rig, genome, tier, control, api, result, namespace, profile, rig.kinds)
        controller_trial.run(trial)
        if record and trial.recorder is not None:
            result.recorded = trial.recorder.history
            result.mark_phases(trial.wall0, trial.faults_end)
        with contextlib.suppress(httpx.HTTPError, ControlError, HTTPError, ApiError):
            pods = {p["metadata"]["name"]: "live" for p in api.list(Pod, namespace=namespace)}
            try:
                read_journal(rig, control, result, namespace, trial.wall0, pods)
                result.own_effect, result.check["ledger"] = judge_trial(
                    result.check, result.effects, genome.action, trial.recorder.history if trial.recorder else None,
                    trial.faults_end, trial.wall0)
            except ledger.LedgerError as e:  # a journal record the ledger cannot read: the trial is no evidence
                result.error = f"LedgerError: {e}"
        with contextlib.suppress(httpx.HTTPError, ControlError):
            control.deactivate()
            control.delete_profile(profile)
        with contextlib.suppress(ApiError, HTTPError):
            load.clean(api, namespace)
    return result
