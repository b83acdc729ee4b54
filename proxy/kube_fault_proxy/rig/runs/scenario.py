"""Scenarios: a cluster, a load, a fault timeline, a settle and what the run must show."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Self

import yaml
from pydantic import AfterValidator, Field, StringConstraints, ValidationError, model_validator

from kube_fault_proxy.proxy.profiles.loader import Problem, ProfileError, compose, problem_from, read_text
from kube_fault_proxy.proxy.profiles.profile import NAME_PATTERN
from kube_fault_proxy.proxy.schema.strict import Duration, StrictModel
from kube_fault_proxy.rig.invariants.catalogue import lookup
from kube_fault_proxy.rig.workloads.shapes import YUNIKORN_GANG

Scheduler = Literal["kube-scheduler", "yunikorn"]
# An expectation is for a scheduler, or for one build of it: `yunikorn+<patch name>` is YuniKorn
# v1.9.0 with patches/…/<patch name>.patch (`--yunikorn-patch`), `yunikorn+src-<dir>` a source tree.
ExpectFor = Annotated[str, StringConstraints(pattern=r"^(kube-scheduler|yunikorn)(\+[A-Za-z0-9._-]+)?$")]
# An invariant by name or alias (`no-phantom-allocation` or `I2`), kept as the key reports use (`I2`).
Invariant = Annotated[str, AfterValidator(lambda word: lookup(word).key)]


class ClusterSpec(StrictModel):
    """The local control plane to run on."""

    nodes: Annotated[int, Field(ge=1, le=1000)] = Field(50, description="fake Nodes run by KWOK")
    scheduler: Scheduler = Field("kube-scheduler", description="the scheduler under test, unless --scheduler says")


# How a load is held back from the scheduler until all of it exists, then released as one wave:
# schedulingGates: every pod is created with a scheduling gate, and the gates are lifted together;
# beforeScheduler: the scheduler under test is stopped before the load and started after it (its
# first list is the wave).
HoldBack = Literal["schedulingGates", "beforeScheduler"]
YUNIKORN_ONLY = YUNIKORN_GANG  # the shape only YuniKorn schedules
# rig.shapes.SCENARIO_SHAPES
Shape = Literal["roomy", "exact-fill", "mixed", "tainted", "anti-affinity", "dra", "dra-binding", "gang", "gang-late",
                "yunikorn-gang"]


class LoadSpec(StrictModel):
    """Pods to create once the timeline's first step has run."""

    count: Annotated[int, Field(ge=1, le=20000)] = Field(100, description="pods to create")
    rate: Annotated[float, Field(gt=0, le=5000)] = Field(
        200.0, description="pods per second asked for (the achieved rate is reported)")
    concurrency: Annotated[int, Field(ge=1, le=256)] = Field(8, description="creations in flight at most")
    namespace: Annotated[str, Field(pattern=NAME_PATTERN)] = Field("default", description="where the pods go")
    cpu: str = Field("100m", description="each pod's cpu request (roomy shape only)")
    memory: str = Field("64Mi", description="each pod's memory request (roomy shape only)")
    holdBack: HoldBack | None = Field(None, description=(
        "create the whole load before the scheduler may take any of it, then release it at once"))
    releaseConcurrency: Annotated[int, Field(ge=1, le=256)] = Field(
        32, description="with holdBack schedulingGates: gate removals (pod patches) in flight")
    shape: Shape = Field("roomy", description=(
        "the workload shape: a tight one gives the nodes its capacity, labels and taints for the run and "
        "sizes and constrains the pods to fill them (cpu and memory then come from the shape); dra publishes "
        "devices of a fake DRA driver on every node and gives each pod a claim for 1-4 of them (the cluster's "
        "kube-controller-manager must run the resourceclaim-controller); gang puts exact-fill's pods in gangs "
        "of PodGroups with minCount (the cluster needs GenericWorkload and the scheduling.k8s.io/v1beta1 API on); "
        "gang-late is the search's only; yunikorn-gang (YuniKorn only) makes every pod an application of its own, "
        "a Hard-style gang of task groups that asks for one 12-cpu placeholder more than there are 16-cpu nodes, "
        "with a 3 s placeholder timeout: each application fails, and the shim fails its pod"))

    @model_validator(mode="after")
    def _release_concurrency_only_with_gates(self) -> Self:
        if "releaseConcurrency" in self.model_fields_set and self.holdBack != "schedulingGates":
            raise ValueError("releaseConcurrency goes with holdBack schedulingGates")
        if self.shape != "roomy" and {"cpu", "memory"} & self.model_fields_set:
            raise ValueError(f"cpu and memory come from the shape {self.shape!r}: set neither")
        if self.shape == "gang-late":
            raise ValueError("gang-late is a search trial's shape (its node comes when the trial's load is in); "
                             "in a scenario, use shape gang with deleteNode and restoreNode steps")
        return self


class KillApiserver(StrictModel):
    """`kill -9` the real kube-apiserver (the seed's method), and start it again, as before, later."""

    restartAfter: Annotated[Duration, Field(gt=0, le=600)] = Field(
        description="start it again this long after the kill (sooner if the run ends)")


class KillScheduler(StrictModel):
    """`kill -9` the scheduler under test (a crash), and start the same build again later: it restarts from
    what the cluster holds. With `onEvent: crash-point`, right after the apiserver committed the write a
    crashPoint rule holds the answer of; when that rule lists `kill` (a correlated crash), the components it
    names die together instead, each started again after its own `restartAfterSeconds`."""

    restartAfter: Annotated[Duration, Field(ge=0, le=600)] = Field(
        description="start the same build again this long after the kill (sooner if the run ends)")


class StopScheduler(StrictModel):
    """Stop the scheduler under test gracefully: `signal` to its main process (as a kubelet stops a container),
    up to `within` for it to exit (past that it is killed with kill -9, so nothing is left), then start the same
    build again `restartAfter` later. The `scheduler-stopped` event records the exit's seconds (or
    `stopTimedOut`) and its exit code; the invariant `graceful-stop-within-bound` judges them. `within` is at
    least 5 s, what YuniKorn's shim alone may wait for its dispatcher; for kube-scheduler, whose only cited
    promise is a pod's default grace period, at least 30 s (checked when the run starts)."""

    signal: Literal["TERM", "INT"] = Field("TERM", description="TERM (SIGTERM, a kubelet's) or INT (SIGINT, Ctrl-C)")
    within: Annotated[Duration, Field(ge=5, le=600)] = Field(
        description="the bound: how long the scheduler may take to exit after the signal (then kill -9)")
    restartAfter: Annotated[Duration, Field(ge=0, le=600)] = Field(
        description="start the same build again this long after it is gone (sooner if the run ends)")


NodeName = Annotated[str, Field(pattern=r"^(held|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$")]
HELD = "held"  # a node or pod named by the held Binding (the first record of the step's onEvent: inject, crash-point)


class NodeStep(StrictModel):
    """One node: by name, or `held`: the node the Binding the proxy holds names (with onEvent inject or
    crash-point; the record's targetNode)."""

    node: NodeName = Field(description="a node's name, or held (the node of the Binding the proxy holds)")


class FlapNode(NodeStep):
    """Delete the node, and create it again under the same name (labels, annotations, podCIDR, capacity kept):
    a kubelet's re-registration. KWOK takes it up again as a new node."""

    downSeconds: Annotated[Duration, Field(ge=0, le=600)] = Field(
        description="create it again this long after the delete (sooner if the run ends)")


class ResizeNode(NodeStep):
    """The node's capacity and allocatable changed (a status patch, as a kubelet's)."""

    cpu: str | None = Field(None, description="new cpu capacity, e.g. 4")
    memory: str | None = Field(None, description="new memory capacity, e.g. 8Gi")
    pods: Annotated[int, Field(ge=0, le=10000)] | None = Field(None, description="new pod capacity")

    @model_validator(mode="after")
    def _something_changes(self) -> Self:
        if self.cpu is None and self.memory is None and self.pods is None:
            raise ValueError("resizeNode needs at least one of cpu, memory, pods")
        return self


class CreateForeignPods(NodeStep):
    """Pods placed by `nodeName`, with a schedulerName other than the one under test (foreign to YuniKorn): each
    runs on the node (KWOK), and YuniKorn books it as a foreign allocation."""

    count: Annotated[int, Field(ge=1, le=100)] = Field(1, description="how many")
    cpu: str = Field("500m", description="each one's cpu request")


class DeletePod(StrictModel):
    """Delete a pod at once (grace period 0)."""

    pod: Literal["held"] = Field(description="held: the pod of the Binding the proxy holds")


# What `onEvent` may wait for: the proxy's outage, crash points and first injection of any rule (journal), the
# end of the load, and the run's own events of a held-back load's release and of a killApiserver,
# killScheduler or stopScheduler step.
EVENTS = ("outage-start", "outage-end", "crash-point", "inject", "load-done", "wave-released", "apiserver-killed",
          "apiserver-restarted", "scheduler-killed", "scheduler-restarted", "scheduler-stopped")


def _event(name: str) -> str:
    if name not in EVENTS:
        raise ValueError("Input should be 'outage-start', 'outage-end' or 'load-done' (or, with holdBack, "
                         "killApiserver, killScheduler, stopScheduler or a crashPoint rule, 'wave-released', "
                         "'apiserver-killed', 'apiserver-restarted', 'scheduler-killed', 'scheduler-stopped', "
                         "'scheduler-restarted' or 'crash-point'; 'inject': the proxy's first injection)")
    return name


Event = Annotated[str, AfterValidator(_event)]


class Step(StrictModel):
    """When (`at` a time after the load starts, `onEvent` a journal or run event, or `afterBinds`
    Bindings answered with success since the run began; plus `after`) and what (one action)."""

    at: Duration | None = Field(None, description="this long after the load starts")
    onEvent: Event | None = Field(
        None, description="once this journal or run event happens (outage-end, crash-point, load-done, …)")
    afterBinds: Annotated[int, Field(ge=1, le=100000)] | None = Field(
        None, description="once the proxy has answered this many Binding POSTs with success (bindsTotal.succeeded)")
    after: Duration = Field(0.0, description="wait this much more after the trigger")
    activate: Annotated[str, Field(pattern=NAME_PATTERN)] | None = Field(None, description="activate this profile")
    deactivate: bool = Field(False, description="back to pass-through")
    touchPods: bool = Field(False, description="annotate every pod of the load: an informer update for each")
    killApiserver: KillApiserver | None = Field(
        None, description="kill -9 the local control plane's kube-apiserver; restart it after restartAfter")
    killScheduler: KillScheduler | None = Field(
        None, description="kill -9 the scheduler under test; start it again after restartAfter")
    deleteNode: NodeStep | None = Field(None, description="delete a node (the rig creates it again after the run)")
    restoreNode: NodeStep | None = Field(None, description="create again a node this run deleted, as it was")
    flapNode: FlapNode | None = Field(None, description="delete a node and create it again downSeconds later")
    cordonNode: NodeStep | None = Field(None, description="mark a node unschedulable, as kubectl cordon")
    uncordonNode: NodeStep | None = Field(None, description="mark a node schedulable again, as kubectl uncordon")
    resizeNode: ResizeNode | None = Field(None, description="change a node's capacity and allocatable")
    createForeignPods: CreateForeignPods | None = Field(
        None, description="create pods bound by nodeName, not by the scheduler under test")
    terminateForeignPods: bool = Field(False, description="mark every foreign pod of the run Succeeded")
    deletePod: DeletePod | None = Field(None, description="delete a pod (held: the held Binding's) at once")
    stopScheduler: StopScheduler | None = Field(
        None, description="signal the scheduler under test (SIGTERM), time its exit against within; start it again")

    def actions(self) -> list[str]:
        """The names of the actions this step sets (a valid step sets one)."""
        flags = {"deactivate": self.deactivate, "touchPods": self.touchPods,
                 "terminateForeignPods": self.terminateForeignPods}
        return [name for name in ACTIONS if flags.get(name, getattr(self, name) is not None) is True]

    @model_validator(mode="after")
    def _one_when_one_what(self) -> Self:
        if sum(w is not None for w in (self.at, self.onEvent, self.afterBinds)) != 1:
            raise ValueError("a step needs exactly one of at, onEvent, afterBinds")
        if len(self.actions()) != 1:
            raise ValueError(f"a step needs exactly one of {', '.join(ACTIONS)}")
        held = [name for name in self.actions() if HELD in (getattr(getattr(self, name), "node", None),
                                                             getattr(getattr(self, name), "pod", None))]
        if held and self.onEvent not in ("inject", "crash-point"):
            raise ValueError(f"{held[0]} on the held Binding's node or pod needs onEvent inject or crash-point")
        return self


ACTIONS = ("activate", "deactivate", "touchPods", "killApiserver", "killScheduler", "deleteNode", "restoreNode",
           "flapNode", "cordonNode", "uncordonNode", "resizeNode", "createForeignPods", "terminateForeignPods",
           "deletePod", "stopScheduler")


class Settle(StrictModel):
    """How the run decides the cluster has settled before checking."""

    quiet: Duration = Field(20.0, description="settled once nothing changed for this long (or every pod is bound)")
    timeout: Duration = Field(240.0, description="give up waiting for quiet after this long")
    grace: Duration = Field(30.0, description="a Pending pod younger than this is not stranded yet")


class Expectation(StrictModel):
    """What one scheduler's run must show."""

    verdict: Literal["clean", "violations"] = Field(description="clean: no invariant breaks; violations: some do")
    invariants: list[Invariant] = Field(default_factory=list, description="with violations: these must fail")
    mayBreak: list[Invariant] = Field(default_factory=list, description=(
        "with clean: these may fail without failing the expectation (a leftover known not to be the bug under test)"))

    @model_validator(mode="after")
    def _may_break_only_when_clean(self) -> Self:
        if self.mayBreak and self.verdict != "clean":
            raise ValueError("mayBreak goes with verdict clean")
        return self


class ScenarioSpec(StrictModel):
    """The whole run."""

    cluster: ClusterSpec = Field(ClusterSpec(), description="the local control plane to run on")
    load: LoadSpec = Field(LoadSpec(), description="the pods to create")
    timeline: list[Step] = Field(default_factory=list, description="the fault steps, each a trigger and one action")
    settle: Settle = Field(Settle(), description="how the run waits before checking the invariants")
    freshScheduler: bool = Field(False, description=(
        "restart the scheduler under test (the same build, through the proxy) before each run, so no run inherits "
        "what an earlier run left in its cache; needs the local control plane (a run's own, or one `cluster up` "
        "brought up, reached with its kubeconfig)"))
    expect: dict[ExpectFor, Expectation] = Field(
        default_factory=dict, description="per scheduler (kube-scheduler, yunikorn) or build (yunikorn+<patch name>)")

    @model_validator(mode="after")
    def _yunikorn_gangs_for_yunikorn(self) -> Self:
        if self.load.shape == YUNIKORN_ONLY and set(self.schedulers()) - {"yunikorn"}:
            raise ValueError(f"load.shape {YUNIKORN_ONLY} is YuniKorn's gang scheduling: expect yunikorn only")
        return self

    def schedulers(self) -> list[str]:
        """The schedulers the expectations are about, in order (a build counts for its scheduler)."""
        return list(dict.fromkeys(key.split("+")[0] for key in self.expect))

    def expectation(self, scheduler: str, variant: str | None = None) -> Expectation | None:
        """What the run must show; a build has only its own expectation, never the release's."""
        return self.expect.get(f"{scheduler}+{variant}" if variant else scheduler)


class ScenarioMeta(StrictModel):
    """Name and story."""

    name: Annotated[str, Field(pattern=NAME_PATTERN)] = Field(description="lowercase DNS-style name")
    description: str = Field("", description="what the scenario reproduces")


class Scenario(StrictModel):
    """apiVersion kube-fault-proxy/v1, kind Scenario."""

    apiVersion: Literal["kube-fault-proxy/v1"] = Field(description="always kube-fault-proxy/v1")
    kind: Literal["Scenario"] = Field(description="always Scenario")
    metadata: ScenarioMeta = Field(description="name and description")
    spec: ScenarioSpec = Field(description="cluster, load, timeline, settle and expectations")


def load_scenario(path: Path) -> Scenario:
    """Load and validate a scenario file; errors name file:line:col and the field path."""
    data, pos = compose(read_text(path), str(path))
    if not isinstance(data, dict):
        raise ProfileError([Problem(str(path), 1, 1, "", "a scenario must be a mapping")])
    try:
        return Scenario.model_validate(data)
    except ValidationError as e:
        raise ProfileError(problem_from(err, pos, str(path)) for err in e.errors()) from None


def dump(scenario: Scenario) -> str:
    """YAML of a scenario, for the report."""
    return yaml.safe_dump(scenario.model_dump(mode="json", exclude_defaults=True), sort_keys=False)
