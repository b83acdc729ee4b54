"""Every invariant the checker knows, by name (the old I1-I5 as aliases) with its meaning, and a Violation of one.

A report keys each invariant by its alias where it has one (`I2`, as saved reports and scenarios
have it), else by its name; wherever an invariant is shown, the name stands beside the alias.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Invariant:
    """One invariant: a self-explaining name, its one-line meaning, and the number it used to go by."""

    name: str
    meaning: str
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
              "+ maxSurge"),
    Invariant("job-never-over-completions", "a Job never has more succeeded pods than its completions"),
    Invariant("indexed-job-one-success-per-index", "an Indexed Job never has two succeeded pods for one index"),
    Invariant("job-active-within-parallelism",
              "a Job never starts a pod that takes its active pods over its parallelism"),
    Invariant("statefulset-one-pod-per-ordinal", "a StatefulSet never has two pods for one ordinal"),
    Invariant("statefulset-none-beyond-replicas-once-settled",
              "once a StatefulSet has observed its spec and counts its replicas, no live pod has an ordinal at or "
              "beyond them"),
    Invariant("daemonset-one-pod-per-node",
              "a DaemonSet never has more than one live pod for a node (two while a rolling update surges)"),
    Invariant("workload-converges",
              "each workload reaches what its spec asks within the bound once the faults end (or its spec "
              "last changed)"),
)

# What a scheduler's status writes must leave (pod_scheduled.py, judged by `check`) and how long a pod may
# wait once the faults end (pod_waits.py); a kube-scheduler search trial judges both.
CONDITION_INVARIANTS = (
    Invariant("bound-pod-scheduled", "every pod its scheduler bound ends with PodScheduled=True "
                                     "(kubernetes#139602: a failed asynchronous bind left it False)"),
    Invariant("no-pod-waits-past-bound", "once the faults end, no pod of the scheduler waits unbound longer than the "
                                         "bound, unless the scheduler calls it Unschedulable (kubernetes#135900: a "
                                         "backlog of asynchronous status patches delayed Bind)"),
)

CATALOGUE = (
    Invariant("stranded", "no pod of the scheduler stays Pending and unbound while some node has room for it"),
    Invariant("missing-node", "no pod is bound to a node that does not exist"),
    # Safety: what every scheduler promises, judged on every pod whoever bound it (KWOK has no
    # kubelet to refuse a bad placement, so only the checker sees one).
    Invariant("no-overcommit", "no node's bound pods request more than its allocatable cpu, memory, "
                               "ephemeral storage, other resources or pod count"),
    Invariant("no-excluded-node", "no pod is on a node its nodeSelector or required node affinity excludes"),
    Invariant("no-untolerated-taint", "no pod is on a node with a NoSchedule or NoExecute taint it does not tolerate"),
    Invariant("no-bind-to-cordoned-node", "no pod is bound to a node after the rig cordoned it"),
    Invariant("no-anti-affinity-breach", "no two pods share a topology domain (a node, for kubernetes.io/hostname) "
                                         "where one's required pod anti-affinity selects the other"),
    Invariant("queue-books-bound-pods", "each queue books as many pods as are really bound in its namespace", "I1"),
    Invariant("no-phantom-allocation",
              "every allocation's pod exists, is bound, and is bound to the allocation's node (no phantoms)", "I2"),
    Invariant("no-ignored-pod", "every pending pod has an ask or an allocation (none is ignored)", "I3"),
    Invariant("shim-cache-agrees", "the shim cache's node for each pod is the apiserver's", "I4"),
    Invariant("no-assumed-pod-left", "no pod is still assumed once the cluster is idle", "I5"),
)
INVARIANTS = {i.key: i for i in CATALOGUE}  # what a scheduler run is judged by (and the search knows)
# Every invariant a report may hold: the scheduler's, and what the workload controllers promise
# (rig/controllers/promises.py, judged on a recorded history at every moment, or on a snapshot by `check`).
KNOWN = {**INVARIANTS, **{i.key: i for i in (*CONTROLLER_INVARIANTS, *CONDITION_INVARIANTS)}}
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

    def as_dict(self) -> dict[str, Any]:
        """JSON form (kind, node and numbers only where set)."""
        out: dict[str, Any] = {"invariant": self.invariant, "message": self.message, "objects": list(self.objects)}
        if self.kind:
            out["kind"] = self.kind
        if self.node:
            out["node"] = self.node
        if self.numbers:
            out["numbers"] = dict(self.numbers)
        return out
