"""One search trial with kube-controller-manager's workload controllers as the target: the controllers talk to the
apiserver through the proxy (kube-scheduler goes direct), the trial makes a small set of workloads and moves them
(scale up and down, a rollout, a StatefulSet pod deleted) under the genome's profile, switches the faults off,
waits for every workload to converge, and judges what the controllers promise (controllers/promises.py) on the
history a recorder watched straight from the apiserver the whole time.

The plan of a trial is data (`plan`), a function of the load size and the workload kinds only, so every trial of a
search, its replays, its control and its shrinking move the same objects the same way."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from kube_fault_proxy.kube.kubeapi import ApiError, HTTPError, Pod, ensure_namespace
from kube_fault_proxy.proxy.control.client import ControlClient, ControlError
from kube_fault_proxy.rig.cluster.controller_manager import regate_controller_manager
from kube_fault_proxy.rig.cluster.record import ClusterError
from kube_fault_proxy.rig.controllers import workloads
from kube_fault_proxy.rig.controllers.apiserver import RESOURCES, Recorder, snapshot
from kube_fault_proxy.rig.controllers.promises import PROMISES, judge, unconverged
from kube_fault_proxy.rig.controllers.world import WORKLOADS
from kube_fault_proxy.rig.invariants import check
from kube_fault_proxy.rig.runs.timeline import timeline_sample
from kube_fault_proxy.rig.search import differential
from kube_fault_proxy.rig.search.genome import Genome
from kube_fault_proxy.rig.search.kinds import event_lag
from kube_fault_proxy.rig.workloads import load

CONTROLLER_MANAGER = "kube-controller-manager"
WORKLOAD_KINDS = ("replicaset", "deployment", "job", "statefulset", "daemonset")  # `--target kcm:<these>`
# Named only, never in the default set: a StatefulSet that updates by `Recreate` (KEP-3541) needs the gate
# StatefulSetRecreateStrategy, Alpha and off in 1.37, Beta and on from 1.38, and no 1.36 apiserver accepts it.
NAMED_ONLY_KINDS = ("statefulset-recreate",)
STEP = 1.5  # seconds between two moves of the plan (each lands while the controllers still act on the last)
BOUND = 30.0  # every workload converges within this after the faults end (`workload-converges`)
POLL = 0.5

Obj = dict[str, Any]


@dataclass(frozen=True)
class Move:
    """One move of a trial's plan: a merge patch of a workload's spec, or a pod deleted (`patch` None)."""

    kind: str  # ReplicaSet, Deployment, StatefulSet, Pod
    name: str
    patch: Obj | None = None

    def describe(self) -> str:
        """What it does, for the trial's steps."""
        if self.patch is None:
            return f"deleted {self.kind} {self.name}"
        spec = self.patch.get("spec", {})
        if "replicas" in spec:
            return f"scaled {self.kind} {self.name} to {spec['replicas']}"
        return f"rolled {self.kind} {self.name} out"


@dataclass(frozen=True)
class Plan:
    """The workloads a trial makes, then its moves, one every STEP seconds (in rounds)."""

    manifests: tuple[Obj, ...]
    rounds: tuple[tuple[Move, ...], ...]

    def pods(self, nodes: int) -> int:
        """How many pods the controllers create for it, all going well (what a count trigger's quantiles are of):
        each workload's pods, each scale-up's new ones, a rollout's new ReplicaSet, a deleted pod made again."""
        replicas: dict[str, int] = {}
        total = 0
        for m in self.manifests:
            spec = m["spec"]
            count = nodes if m["kind"] == "DaemonSet" else int(spec.get("completions", spec.get("replicas", 1)))
            replicas[m["metadata"]["name"]] = count
            total += count
        for moves in self.rounds:
            for mv in moves:
                spec = (mv.patch or {}).get("spec", {})
                if mv.patch is None:
                    total += 1
                elif "replicas" in spec:
                    total += max(0, int(spec["replicas"]) - replicas[mv.name])
                    replicas[mv.name] = int(spec["replicas"])
                elif "template" in spec:
                    total += replicas[mv.name]
        return total


def plan(pods: int, kinds: Sequence[str] = WORKLOAD_KINDS) -> Plan:
    """The workloads for a load of about `pods` pods, of these kinds, and their moves: a ReplicaSet scaled up then
    down, a Deployment rolled out and scaled, two Jobs (one indexed) running to completion, a StatefulSet scaled up,
    down and one of its pods deleted, a DaemonSet on every node; named only, a StatefulSet that updates by
    Recreate rolled out twice (the second time while it scales up). ValueError names an unknown kind."""
    unknown = sorted(set(kinds) - set(WORKLOAD_KINDS) - set(NAMED_ONLY_KINDS))
    if unknown or not kinds:
        raise ValueError(f"unknown workload kind(s) {', '.join(unknown) or '(none)'}; "
                         f"known: {', '.join(WORKLOAD_KINDS + NAMED_ONLY_KINDS)}")
    r, d, c, s = max(2, pods // 5), max(2, pods // 10), max(2, pods // 10), min(5, max(2, pods // 20))
    manifests: list[Obj] = []
    rounds: list[list[Move]] = [[], [], [], []]
    if "replicaset" in kinds:
        manifests.append(workloads.replicaset("rs", r))
        rounds[0].append(Move("ReplicaSet", "rs", {"spec": {"replicas": 2 * r}}))
        rounds[2].append(Move("ReplicaSet", "rs", {"spec": {"replicas": max(1, r // 2)}}))
    if "deployment" in kinds:
        manifests.append(workloads.deployment("web", d))
        rounds[0].append(Move("Deployment", "web", {"spec": {"template": {"metadata": {"annotations": {
            "kfp-rollout": "2"}}}}}))
        rounds[1].append(Move("Deployment", "web", {"spec": {"replicas": d + 1}}))
    if "job" in kinds:
        manifests += [workloads.job("batch", c, max(2, c // 2)), workloads.job("indexed", c, c // 2 + 1, indexed=True)]
    if "statefulset" in kinds:
        manifests.append(workloads.statefulset("db", s))
        rounds[1].append(Move("StatefulSet", "db", {"spec": {"replicas": s + 2}}))
        rounds[3] += [Move("StatefulSet", "db", {"spec": {"replicas": 1}}), Move("Pod", "db-0")]
    if "daemonset" in kinds:
        manifests.append(workloads.daemonset("agent"))
    if "statefulset-recreate" in kinds:
        manifests.append(workloads.statefulset("cache", s, strategy="Recreate"))
        rounds[0].append(Move("StatefulSet", "cache", {"spec": {"template": {"metadata": {"annotations": {
            "kfp-rollout": "2"}}}}}))
        rounds[2] += [Move("StatefulSet", "cache", {"spec": {"template": {"metadata": {"annotations": {
            "kfp-rollout": "3"}}}}}), Move("StatefulSet", "cache", {"spec": {"replicas": s + 1}})]
    return Plan(tuple(manifests), tuple(tuple(m) for m in rounds if m))


def restart(cluster: Any) -> float:
    """kube-controller-manager started afresh with the gates it runs with (empty caches and queues: nothing an
    earlier trial's faults left leaks into this one); the seconds it took."""
    return regate_controller_manager(cluster, cluster.feature_gates.get(CONTROLLER_MANAGER, {}))


class ControllerTrial:
    """One trial's phases on a kube-controller-manager rig (trial.Rig), filling a trial.TrialResult."""

    def __init__(self, rig: Any, genome: Genome, tier: Any, control: ControlClient, api: Any, result: Any,
                 namespace: str, profile: str, kinds: Sequence[str]) -> None:
        self.rig, self.genome, self.tier, self.control, self.api = rig, genome, tier, control, api
        self.result, self.namespace, self.profile = result, namespace, profile
        self.plan = plan(genome.pods, kinds)
        self.wall0 = time.time()
        self.faults_end: float | None = None
        self.recorder: Recorder | None = None

    def prepare(self) -> None:
        """A fresh kube-controller-manager, the trial's namespace, the journal read past what came before."""
        self.result.restart_seconds = restart(self.rig.cluster)
        ensure_namespace(self.api, self.namespace)
        self.rig.cursor = self.control.journal_after(self.rig.cursor).next

    def step(self, did: str) -> None:
        self.result.steps.append({"t": round(time.time() - self.wall0, 2), "did": did})

    def signature(self) -> tuple[Any, ...]:
        """What quiet means: no workload or pod changed (their revisions) and the proxy injected nothing more."""
        world = snapshot(self.api, [self.namespace])
        stats = self.control.stats()
        pods = list(world.objects["Pod"].values())
        self.result.samples.append(timeline_sample(round(time.time() - self.wall0, 2), pods, stats))
        return (tuple(sorted((k, u, o["metadata"].get("resourceVersion")) for k, objs in world.objects.items()
                             if k != "Node" for u, o in objs.items())), stats["injectionsTotal"])

    def converged(self) -> bool:
        return not unconverged(snapshot(self.api, [self.namespace]), [self.namespace])

    def settle(self, quiet: float | None, timeout: float, converged_and_quiet: bool = False) -> bool:
        """Until every workload converged, or (with `quiet`) nothing changed for that long, or the timeout; whether
        it ended quiet or converged. With `converged_and_quiet`, until both: converged, and then nothing changed for
        `quiet` (a workload's status may still catch up with its pods, e.g. after a watch edited to lag releases
        what it kept back when the profile is switched off); the end state is read after it."""
        deadline, last, since = time.monotonic() + timeout, None, time.monotonic()
        while time.monotonic() < deadline:
            converged = self.converged()
            if converged and not converged_and_quiet:
                return True
            sig = self.signature()
            if sig != last:
                last, since = sig, time.monotonic()
            elif quiet is not None and time.monotonic() - since >= quiet and (converged or not converged_and_quiet):
                return True
            time.sleep(POLL)
        return False

    def run(self) -> None:
        """Activate, make the workloads, move them, the genome's action, the faults off, converge, judge."""
        kube = self.rig.cluster.admin_api()
        with Recorder(kube, [self.namespace]) as self.recorder:
            if self.genome.rules:
                self.control.activate(self.genome.document(self.profile), self.genome.seed)
            self.wall0 = time.time()
            self.result.events.append({"event": "activate", "t": 0.0, "profile": self.profile})
            for m in self.plan.manifests:
                self.api.create(RESOURCES[m["kind"]].from_dict(m), namespace=self.namespace)
            self.step(f"made {', '.join(m['kind'] + ' ' + m['metadata']['name'] for m in self.plan.manifests)}")
            for moves in self.plan.rounds:
                time.sleep(STEP)
                for mv in moves:
                    with contextlib.suppress(ApiError):  # a pod already gone, a workload the fault kept back
                        if mv.patch is None:
                            self.api.delete(Pod, mv.name, namespace=self.namespace, grace_period=0)
                        else:
                            self.api.patch(RESOURCES[mv.kind], mv.name, mv.patch, namespace=self.namespace)
                        self.step(mv.describe())
            quiet1 = self.settle(self.tier.quiet, self.tier.timeout)
            if self.genome.action is not None:
                self.step(load.act_on_pods(self.api, self.genome.action, self.namespace))
            self.control.deactivate()  # every fault is over before the judging
            self.faults_end = time.time()
            self.result.events.append({"event": "deactivate", "t": round(self.faults_end - self.wall0, 2)})
            quiet = max(self.tier.quiet, event_lag(self.genome.rules) + 1.0)  # a lagging watch's events have come
            converged = self.settle(quiet, max(self.tier.timeout, BOUND + 5), converged_and_quiet=True)
            self.result.quiet = quiet1 and converged

    def judge(self) -> None:
        """The controllers' promises over the recorded history (convergence within BOUND of the faults' end)."""
        assert self.recorder is not None
        history = self.recorder.history
        violations = judge(history, self.faults_end, BOUND)
        world = snapshot(self.api, [self.namespace])
        counts = {"workloads": sum(len(world.objects[k]) for k in world.objects if k not in ("Pod", "Node")),
                  "pods": len(world.objects["Pod"]), "changes": len(history.changes)}
        report = check.Report(violations, counts, list(PROMISES), quiet=self.result.quiet)
        pods = list(world.objects["Pod"].values())
        made = [(k, o) for k in WORKLOADS for o in world.objects[k].values()]
        self.result.end_state = {**differential.pod_facts(pods), **differential.workload_facts(made, pods)}
        self.result.check = report.as_dict()
        self.result.broken = sorted(n for n, vs in report.by_invariant().items() if vs)


def run(trial: ControllerTrial) -> None:
    """The trial's phases; errors the faults or the components cause are recorded on the result, not raised."""
    try:
        trial.prepare()
        trial.run()
        trial.judge()
    except (httpx.HTTPError, ControlError, HTTPError, ApiError, KeyError, ValueError, ClusterError,
            RuntimeError) as e:
        trial.result.error = f"{type(e).__name__}: {e}"
