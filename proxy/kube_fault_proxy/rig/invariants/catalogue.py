"""Every invariant the checker knows, by name (the old I1-I5 as aliases) with its meaning, and a Violation of one.

Each invariant quotes the upstream promise it encodes (`Promise`: the text, and the page, or the source file
and function at the versions the rig builds); docs/concepts/invariants.md says, for each, whether the
invariant is no stronger than that promise. A report keys each invariant by its alias where it has one
(`I2`, as saved reports and scenarios have it), else by its name; wherever an invariant is shown, the name
stands beside the alias.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

K8S = "kubernetes v1.37.2"  # the source the rig builds; k8s.io/api v0.37.2 is its staging/src/k8s.io/api
API = "k8s.io/api v0.37.2"
CORE = "yunikorn-core v1.9.0"
SHIM = "yunikorn-k8shim v1.9.0"
# The releases whose new code the DRA, gang and StatefulSet Recreate invariants judge (the rig builds them too:
# --kubernetes); v1.37.2 is also the default release, so its promises cite K8S.
K8S_137 = K8S
K8S_138 = "kubernetes v1.38.0-beta.0"
API_138 = "k8s.io/api v0.38.0-beta.0"
DRA_138 = "k8s.io/dynamic-resource-allocation v0.38.0-beta.0"
DOCS = "https://kubernetes.io/docs/"
_REPOS = {K8S: "https://github.com/kubernetes/kubernetes/blob/v1.37.2/",
          API: "https://github.com/kubernetes/api/blob/v0.37.2/",
          CORE: "https://github.com/apache/yunikorn-core/blob/v1.9.0/",
          SHIM: "https://github.com/apache/yunikorn-k8shim/blob/v1.9.0/",
          K8S_138: "https://github.com/kubernetes/kubernetes/blob/v1.38.0-beta.0/",
          API_138: "https://github.com/kubernetes/api/blob/v0.38.0-beta.0/",
          DRA_138: "https://github.com/kubernetes/dynamic-resource-allocation/blob/v0.38.0-beta.0/"}
_SOURCE = re.compile(r"https://\S+|(?:" + "|".join(map(re.escape, _REPOS)) + r"): \S+\.go, \S.*")


@dataclass(frozen=True)
class Promise:
    """What upstream promises, quoted exactly (fragments of one source joined by ` … `), and where: a
    documentation link, or `component version: file, function` in the source the rig builds."""

    quote: str
    source: str

    def __post_init__(self) -> None:
        if not self.quote.strip():
            raise ValueError(f"a promise from {self.source!r} has no quote")
        if not _SOURCE.fullmatch(self.source):
            raise ValueError(f"promise source {self.source!r} is neither a link nor 'component version: file.go, "
                             "function'")

    @property
    def link(self) -> str:
        """Where to read it: the documentation page, or the source file at the version the rig builds."""
        if self.source.startswith("https://"):
            return self.source
        component, _, rest = self.source.partition(": ")
        return _REPOS[component] + rest.split(",")[0]

    @property
    def fragments(self) -> tuple[str, ...]:
        """Each exact piece of upstream text the quote holds."""
        return tuple(f.strip() for f in self.quote.split(" … "))


@dataclass(frozen=True)
class Invariant:
    """One invariant: a self-explaining name, its one-line meaning, the upstream promise it encodes (required:
    an invariant is never stronger than what the component promises), and the number it used to go by."""

    name: str
    meaning: str
    promise: Promise
    alias: str | None = None

    @property
    def key(self) -> str:
        """What reports, scenarios and the search key it by: the alias if it has one, else the name."""
        return self.alias or self.name

    @property
    def label(self) -> str:
        """How tables show it: `I2 no-phantom-allocation`, or just the name."""
        return f"{self.alias} {self.name}" if self.alias else self.name


CONTROLLER_INVARIANTS = (
    Invariant("replicaset-never-over-replicas",
              "a ReplicaSet's controller never makes or adopts a pod that takes its live pods over the replicas of "
              "every generation it may have acted on, from the last status.observedGeneration it wrote to the newest "
              "(it decides on the spec it observed: 'observedGeneration reflects the generation of the most recently "
              "observed ReplicaSet', apps/v1 API; a scale-down's surplus may linger); a snapshot judges only a "
              "ReplicaSet whose status says it settled; a Deployment's ReplicaSets never ask for more than replicas "
              "+ maxSurge of every generation its controller may have acted on (a snapshot: once its status says "
              "it observed the current one)",
              Promise("ObservedGeneration reflects the generation of the most recently observed ReplicaSet. … The "
                      "maximum number of pods that can be scheduled above the desired number of pods.",
                      f"{API}: apps/v1/types.go, ReplicaSetStatus.ObservedGeneration, "
                      "RollingUpdateDeployment.MaxSurge")),
    Invariant("job-never-over-completions", "a Job never has more succeeded pods than its completions",
              Promise("Specifies the desired number of successfully finished pods the job should be run with.",
                      f"{API}: batch/v1/types.go, JobSpec.Completions")),
    Invariant("indexed-job-one-success-per-index", "an Indexed Job never has two succeeded pods for one index",
              Promise("The Job is considered complete when there is one successfully completed Pod for each index.",
                      f"{API}: batch/v1/types.go, JobSpec.CompletionMode")),
    Invariant("job-active-within-parallelism",
              "a Job never starts a pod that takes its active pods over its parallelism",
              Promise("Specifies the maximum desired number of pods the job should run at any given time.",
                      f"{API}: batch/v1/types.go, JobSpec.Parallelism")),
    Invariant("statefulset-one-pod-per-ordinal", "a StatefulSet never has two pods for one ordinal",
              Promise("StatefulSet ensures that, at any time, there is at most one Pod with a given identity running "
                      "in a cluster.",
                      f"{DOCS}tasks/run-application/force-delete-stateful-set-pod/#statefulset-considerations")),
    Invariant("statefulset-none-beyond-replicas-once-settled",
              "once a StatefulSet has observed its spec and counts its replicas, no live pod has an ordinal at or "
              "beyond them",
              Promise("It tries to ensure that the specified number of Pods from ordinal 0 through N-1 are alive and "
                      "ready.",
                      f"{DOCS}tasks/run-application/force-delete-stateful-set-pod/#statefulset-considerations")),
    Invariant("statefulset-recreate-never-mixes-revisions",
              "a StatefulSet that updates by Recreate never creates a pod while a pod of another revision of it "
              "exists and has not ended (Succeeded or Failed); a pod being deleted still counts, it is not fully "
              "terminated",
              Promise("RecreateStatefulSetStrategyType indicates that all existing pods will be deleted and fully "
                      "terminated before any new-revision pods are created. This ensures that old and new revision "
                      "Pods never run at the same time.",
                      f"{API_138}: apps/v1/types.go, RecreateStatefulSetStrategyType")),
    Invariant("daemonset-one-pod-per-node",
              "a DaemonSet never has more than one live pod for a node (two while a rolling update surges)",
              Promise("When surge is not enabled, if there is more than 1 running pod on a node delete all but the "
                      "oldest",
                      f"{K8S}: pkg/controller/daemon/daemon_controller.go, DaemonSetsController.podsShouldBeOnNode")),
    Invariant("workload-converges",
              "each workload reaches what its spec asks within the bound once the faults end (or its spec "
              "last changed)",
              Promise("Replicas is the number of desired pods.",
                      f"{API}: apps/v1/types.go, ReplicaSetSpec.Replicas")),
)

# What a scheduler's status writes must leave (pod_scheduled.py, judged by `check`) and how long a pod may
# wait once the faults end (pod_waits.py); a kube-scheduler search trial judges both.
CONDITION_INVARIANTS = (
    Invariant("bound-pod-scheduled", "every pod its scheduler bound ends with PodScheduled=True "
                                     "(kubernetes#139602: a failed asynchronous bind left it False)",
              Promise("podutil.UpdatePodCondition(&pod.Status, &api.PodCondition{ Type: api.PodScheduled, Status: "
                      "api.ConditionTrue, })",
                      f"{K8S}: pkg/registry/core/pod/storage/storage.go, BindingREST.setPodNodeAndMetadata")),
    Invariant("no-pod-waits-past-bound", "once the faults end, no pod of the scheduler waits unbound longer than the "
                                         "bound, unless the scheduler calls it Unschedulable (kubernetes#135900: a "
                                         "backlog of asynchronous status patches delayed Bind)",
              Promise("DefaultPodMaxBackoffDuration is the default value for the max backoff duration for "
                      "unschedulable pods.",
                      f"{K8S}: pkg/scheduler/backend/queue/scheduling_queue.go, DefaultPodMaxBackoffDuration")),
)

# What DRA and gang scheduling promise (devices.py and gangs.py, judged on a recorded history or a snapshot).
FEATURE_INVARIANTS = (
    Invariant("device-allocated-once",
              "no device is in the allocation of two claims at once, unless the slice allows it multiple "
              "allocations (consumable capacity) or a result has admin access",
              Promise("All constraints satisfied. Mark as in use (unless we do admin access or allow multiple "
                      "allocations) and record the result.",
                      f"{DRA_138}: structured/internal/stable/allocator_stable.go, allocator.allocateDevice")),
    Invariant("bound-pod-claims-reserved",
              "when a pod with resource claims is bound (and while it lives, not terminating), each of its claims "
              "is allocated and reserved for it (or for its PodGroup, for a PodGroup's claim)",
              Promise("reservedFor indicates which entities are currently allowed to use the claim. A Pod which "
                      "references a ResourceClaim which is not reserved for that Pod will not be started. … "
                      "allocation is set once the claim has been allocated successfully.",
                      f"{API_138}: resource/v1/types.go, ResourceClaimStatus.ReservedFor, "
                      "ResourceClaimStatus.Allocation")),
    Invariant("gang-all-or-nothing",
              "no gang PodGroup has fewer than minCount members ever bound, but some, for longer than the timeout "
              "after its first member was bound (members bound and deleted since still count)",
              Promise("minCount is the minimum number of pods that must be schedulable or scheduled at the same time "
                      "for the scheduler to admit the entire group.",
                      f"{API_138}: scheduling/v1beta1/types.go, GangSchedulingPolicy.MinCount")),
    Invariant("scheduler-not-stuck",
              "once the gangs are quiet, a new pod that fits schedules within the bound",
              Promise("activeQ is heap structure that scheduler actively looks at to find pods to schedule.",
                      f"{K8S_138}: pkg/scheduler/backend/queue/active_queue.go, activeQueue.queue")),
)

# What a scheduler promises of its own stop (graceful_stop.py), judged from a run's events: each stopScheduler
# step's scheduler exits within the step's bound. The bound is never under the promise: 5 s for YuniKorn (its
# shim's dispatcher wait), 30 s for kube-scheduler (a pod's default terminationGracePeriodSeconds, k8s.io/api
# core/v1 PodSpec.TerminationGracePeriodSeconds), checked when a run starts.
STOP_INVARIANTS = (
    Invariant("graceful-stop-within-bound",
              "each stopScheduler step's scheduler exits within the step's bound (within) after SIGTERM or SIGINT; "
              "the bound is at least 5 s for YuniKorn, whose shim's Stop waits at most 5 s for its dispatcher before "
              "main exits, and at least 30 s for kube-scheduler, a pod's default terminationGracePeriodSeconds",
              Promise("wait until the main event loop stops properly … dispatcher did not stop in time",
                      f"{SHIM}: pkg/dispatcher/dispatcher.go, Stop")),
)

CATALOGUE = (
    Invariant("stranded", "no pod of the scheduler stays Pending and unbound while some node has room for it",
              Promise("If a pod stays in unschedulableEntities for longer than this value, the pod will be moved "
                      "from unschedulableEntities to backoffQ or activeQ.",
                      f"{K8S}: pkg/scheduler/backend/queue/scheduling_queue.go, "
                      "DefaultPodMaxInUnschedulablePodsDuration")),
    Invariant("missing-node", "no pod is bound to a node that does not exist",
              Promise("gcOrphaned deletes pods that are bound to nodes that don't exist.",
                      f"{K8S}: pkg/controller/podgc/gc_controller.go, PodGCController.gcOrphaned")),
    # Safety: what every scheduler promises, judged on every pod whoever bound it (KWOK has no
    # kubelet to refuse a bad placement, so only the checker sees one).
    Invariant("no-overcommit", "no node's bound pods request more than its allocatable cpu, memory, "
                               "ephemeral storage, other resources or pod count",
              Promise("Checks if a node has sufficient resources, such as cpu, memory, gpu, opaque int resources etc "
                      "to run a pod.",
                      f"{K8S}: pkg/scheduler/framework/plugins/noderesources/fit.go, Fit.Filter")),
    Invariant("no-excluded-node", "no pod is on a node its nodeSelector or required node affinity excludes",
              Promise("Selector which must match a node's labels for the pod to be scheduled on that node. … If the "
                      "affinity requirements specified by this field are not met at scheduling time, the pod will not "
                      "be scheduled onto the node.",
                      f"{API}: core/v1/types.go, PodSpec.NodeSelector, "
                      "NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution")),
    Invariant("no-untolerated-taint", "no pod is on a node with a NoSchedule or NoExecute taint it does not tolerate",
              Promise("Do not allow new pods to schedule onto the node unless they tolerate the taint, but allow all "
                      "pods submitted to Kubelet without going through the scheduler to start, and allow all "
                      "already-running pods to continue running. Enforced by the scheduler.",
                      f"{API}: core/v1/types.go, TaintEffectNoSchedule")),
    Invariant("no-bind-to-cordoned-node", "no pod is bound to a node after the rig cordoned it",
              Promise("NodeUnschedulable plugin filters nodes that set node.Spec.Unschedulable=true unless the pod "
                      "tolerates {key=node.kubernetes.io/unschedulable, effect:NoSchedule} taint.",
                      f"{K8S}: pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go, "
                      "NodeUnschedulable")),
    Invariant("no-anti-affinity-breach", "no two pods share a topology domain (a node, for kubernetes.io/hostname) "
                                         "where one's required pod anti-affinity selects the other",
              Promise("If the anti-affinity requirements specified by this field are not met at scheduling time, the "
                      "pod will not be scheduled onto the node.",
                      f"{API}: core/v1/types.go, PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution")),
    Invariant("queue-books-bound-pods", "each queue books as many pods as are really bound in its namespace, and "
                                        "the root queue as many as are bound in all",
              Promise("IncAllocatedResource increments the allocated resources for this queue (recursively). … "
                      "DecAllocatedResource decrement the allocated resources for this queue (recursively)",
                      f"{CORE}: pkg/scheduler/objects/queue.go, Queue.IncAllocatedResource, "
                      "Queue.DecAllocatedResource"), "I1"),
    Invariant("no-phantom-allocation",
              "every allocation's pod exists, is bound, and is bound to the allocation's node (no phantoms)",
              Promise("The result of the binding is tracked and failures are properly handled. If successful, we "
                      "move task to next state BOUND, otherwise we fail the task … beforeTaskFail releases the "
                      "allocation or ask from scheduler core",
                      f"{SHIM}: pkg/cache/task.go, Task.postTaskAllocated, Task.beforeTaskFail"), "I2"),
    Invariant("no-ignored-pod", "every pending pod has an ask or an allocation (none is ignored)",
              Promise("this is called after task reaches PENDING state, submit the resource asks from this task to "
                      "the scheduler core",
                      f"{SHIM}: pkg/cache/task.go, Task.postTaskPending"), "I3"),
    Invariant("shim-cache-agrees", "the shim cache's node for each pod is the apiserver's",
              Promise("forget pod must be called when a pod is assumed to be running on a node, but then for some "
                      "reason it is failed to bind or released.",
                      f"{SHIM}: pkg/cache/context.go, Context.ForgetPod"), "I4"),
    Invariant("no-assumed-pod-left", "no pod is still assumed once the cluster is idle",
              Promise("delete all assumed state from cache, as pod has now been bound",
                      f"{SHIM}: pkg/cache/external/scheduler_cache.go, SchedulerCache.updatePod"), "I5"),
    # Node churn (node_loss.py): what YuniKorn's books must say once the nodes the rig deleted are gone or back.
    Invariant("no-allocation-on-missing-node",
              "no YuniKorn allocation, its own or foreign, names a node that no longer exists once the cluster is "
              "quiet",
              Promise("removeNodeAllocations removes all allocations that are assigned to a node as part of the node "
                      "removal.",
                      f"{CORE}: pkg/scheduler/partition.go, PartitionContext.removeNodeAllocations")),
    Invariant("no-foreign-allocation-for-terminated-pod",
              "no foreign allocation (a pod another scheduler or nodeName placed) is booked for a pod that "
              "terminated or is gone",
              Promise("this means pod is terminated … remove from the scheduler cache and create release request to "
                      "remove foreign allocation from the core",
                      f"{SHIM}: pkg/cache/context.go, Context.updateForeignPod")),
    Invariant("assumed-pod-rescheduled",
              "a pod YuniKorn placed on a node the rig then deleted, and never bound, is not held there: it is "
              "scheduled again",
              Promise("we shouldn't need to do any processing of them as the core will send back remove events for "
                      "each of them … forget pod must be called when a pod is assumed to be running on a node, but "
                      "then for some reason it is failed to bind or released.",
                      f"{SHIM}: pkg/cache/context.go, Context.deleteNodeInternal, Context.ForgetPod")),
)
INVARIANTS = {i.key: i for i in CATALOGUE}  # what a scheduler run is judged by (and the search knows)
# Every invariant a report may hold: the scheduler's, what the workload controllers promise
# (rig/controllers/promises.py, judged on a recorded history at every moment, or on a snapshot by `check`), the
# conditions and features above, and a scenario run's stops (judged from its events).
KNOWN = {**INVARIANTS, **{i.key: i for i in (*CONTROLLER_INVARIANTS, *CONDITION_INVARIANTS, *FEATURE_INVARIANTS,
                                               *STOP_INVARIANTS)}}
_BY_WORD = {**{i.name: i for i in KNOWN.values()}, **KNOWN}


def lookup(word: str) -> Invariant:
    """The invariant a name or an alias means; ValueError names the known ones."""
    try:
        return _BY_WORD[word]
    except KeyError:
        known = ", ".join(i.label for i in KNOWN.values())
        raise ValueError(f"unknown invariant {word!r} (known: {known})") from None


def label(key: str) -> str:
    """A report key as tables show it (an unknown key, from some other report, as it is)."""
    return KNOWN[key].label if key in KNOWN else key


@dataclass(frozen=True)
class Violation:
    """One broken invariant, what kind of break it is, and the objects that break it."""

    invariant: str
    message: str
    objects: tuple[str, ...] = ()
    kind: str = ""  # where an invariant breaks in more than one way, which (I2: phantom, wrong-node, no-pod)
    node: str = ""  # the node it happens on, where there is one
    numbers: dict[str, float] = field(default_factory=dict, hash=False)  # what was counted (requested, …)
    # `stranded`: the nodes with room for the pod, each with its resourceVersion at the check ('' if it had none)
    room: dict[str, str] = field(default_factory=dict, hash=False)

    def as_dict(self) -> dict[str, Any]:
        """JSON form (kind, node, numbers and room only where set)."""
        out: dict[str, Any] = {"invariant": self.invariant, "message": self.message, "objects": list(self.objects)}
        if self.kind:
            out["kind"] = self.kind
        if self.node:
            out["node"] = self.node
        if self.numbers:
            out["numbers"] = dict(self.numbers)
        if self.room:
            out["room"] = dict(self.room)
        return out
