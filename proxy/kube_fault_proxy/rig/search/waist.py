"""A search target's narrow waist: the requests its grammar draws rules on, the request a count trigger counts,
and the writes a write fault acts on. A scheduler's waist is its Bindings; kube-controller-manager's is the pods
its workload controllers create and delete, their status writes and the watches their caches are fed by.

Pure data: the grammar (grammar.py) and the pre-check (precheck.py) read a Waist; nothing here runs anything."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kube_fault_proxy.proxy.faults import KINDS
from kube_fault_proxy.rig.search.kinds import traits
from kube_fault_proxy.rig.workloads.shapes import DEVICE_SHAPES

Selector = dict[str, Any]
# (name, selector, weight, is a watch): a rule's match is drawn from these by weight.
Match = tuple[str, Selector, int, bool]

CONTROLLER_MANAGER = "kube-controller-manager"
TARGETS = ("yunikorn", "kube-scheduler", CONTROLLER_MANAGER)  # what `search --target` takes

BINDING: Selector = {"verbs": ["create"], "resources": ["pods"], "subresources": ["binding"]}
POD_CREATE: Selector = {"verbs": ["create"], "resources": ["pods"]}
WORKLOAD_RESOURCES = ["daemonsets", "deployments", "jobs", "replicasets", "statefulsets"]


@dataclass(frozen=True)
class Waist:
    """Where a target's rules are drawn."""

    anchor: Selector  # the request a count trigger counts, and the one a companion reopen rule acts on
    matches: tuple[Match, ...]
    writes: tuple[str, ...]  # the match names a kind acting on writes is drawn on
    resent_writes: tuple[str, ...]  # the match names a kind acting on writes the proxy sends again is drawn on
    hold_until: dict[str, Selector]  # events held on this match -> the other watch's event that releases them
    trial_does: frozenset[str] = frozenset()  # what this target's trial does for a kind (a kind's `trial_needs`)
    refused: str = ""  # why a kind whose needs the trial does not meet is refused

    def names(self) -> tuple[str, ...]:
        """The match names, in draw order."""
        return tuple(m[0] for m in self.matches)

    @property
    def no_kinds(self) -> tuple[str, ...]:
        """Kinds this target's trial cannot run: what they need of a trial it does not do (why: `refused`)."""
        return tuple(k.kind for k in KINDS if not k.traits.trial_needs <= self.trial_does)

    def acting_on(self, kind: str) -> tuple[Match, ...]:
        """The matches a rule of the kind is drawn from, in draw order: the requests its traits say it acts on
        (ValueError for a kind this target refuses, or one it has no such request for: never any request)."""
        if kind in self.no_kinds:
            raise ValueError(f"fault kind {kind!r}: {self.refused}")
        acts_on = traits(kind).acts_on
        named = {"write": self.writes, "resent-write": self.resent_writes}.get(acts_on)
        options = tuple(m for m in self.matches if (m[0] in named if named is not None else
                                                    acts_on == "any" or m[3] == (acts_on == "watch")))
        if not options:
            raise ValueError(f"fault kind {kind!r} acts on {acts_on} requests; this waist has none")
        return options


# The weights: docs/guides/search.md, "How it searches".
SCHEDULER = Waist(
    anchor=BINDING,
    matches=(
        ("binding", BINDING, 30, False),
        ("pod-watch", {"verbs": ["watch"], "resources": ["pods"]}, 20, True),
        ("pod-list", {"verbs": ["list"], "resources": ["pods"]}, 8, False),
        ("node-watch", {"verbs": ["watch"], "resources": ["nodes"]}, 6, True),
        ("node-list", {"verbs": ["list"], "resources": ["nodes"]}, 4, False),
        ("pod-write", {"verbs": ["patch", "update"], "resources": ["pods"]}, 10, False),
        ("events", {"resources": ["events"]}, 5, False),
        ("any", {}, 5, False),
    ),
    # Schedulers on client-go 1.35/1.36 relist through WatchList (a watch with sendInitialEvents), never a LIST,
    # so a kind acting on relists (a stale view) is drawn on watches (it acts on their WatchList relists); a write
    # kind on the writes a trial's workload makes.
    writes=("binding", "pod-write"),
    resent_writes=("binding", "pod-write"),
    # skew: the node watch held until a pod is seen bound; the pod watch until a node event passes
    hold_until={"node-watch": {"resource": "pods", "events": {"types": ["MODIFIED"], "hasNodeName": True}},
                "pod-watch": {"resource": "nodes"}},
    trial_does=frozenset({"kill"}),  # the trial kills the scheduler on a crash-point record, and starts it again
)

# kube-controller-manager's workload controllers (replicaset, deployment, job, statefulset, daemonset): they
# create and delete pods, write their objects' status (Jobs also patch their pods' finalizers), and act on what
# their informers show them. The pod watch and the workloads' watches are separate streams: a hold skews
# them (the controller sees its own ReplicaSet change before the pods it made, or the reverse).
CONTROLLERS = Waist(
    anchor=POD_CREATE,
    matches=(
        ("pod-create", POD_CREATE, 30, False),
        ("pod-watch", {"verbs": ["watch"], "resources": ["pods"]}, 20, True),
        ("pod-delete", {"verbs": ["delete"], "resources": ["pods"]}, 10, False),
        ("status-write", {"verbs": ["update", "patch"], "resources": list(WORKLOAD_RESOURCES),
                          "subresources": ["status"]}, 10, False),
        ("workload-watch", {"verbs": ["watch"], "resources": list(WORKLOAD_RESOURCES)}, 8, True),
        ("pod-write", {"verbs": ["patch", "update"], "resources": ["pods"]}, 6, False),
        ("replicaset-write", {"verbs": ["create", "update", "patch"], "resources": ["replicasets"]}, 5, False),
        ("events", {"resources": ["events"]}, 3, False),
        ("any", {}, 5, False),
    ),
    writes=("pod-create", "pod-delete", "status-write", "pod-write"),
    # a late commit is drawn on the creates, deletes and status writes, not on the pods' own patches (as since the
    # waist came)
    resent_writes=("pod-create", "pod-delete", "status-write"),
    hold_until={"pod-watch": {"resource": "replicasets"},
                "workload-watch": {"resource": "pods", "events": {"types": ["ADDED"]}}},
    refused="a crash point kills the scheduler; a kube-controller-manager trial does not kill its target",
)


# kube-scheduler on a device workload (workloads/shapes.py's DEVICE_SHAPES) writes more than Bindings: its
# dynamic-resources plugin adds its finalizer to a pod's ResourceClaims (an update) and writes their allocation
# into their status in PreBind, before the Binding (an update or a patch of `status`; v1.38.0-beta.0
# dynamicresources.go), and its informers watch the claims and the ResourceSlices. The scheduler's own matches are
# kept, first and with their weights; the claims' are added after them, so a search without a device shape draws
# from the scheduler's waist exactly as before.
CLAIM_WRITE: Selector = {"verbs": ["update", "patch"], "resources": ["resourceclaims"]}
DEVICE_SCHEDULER = Waist(
    anchor=BINDING,
    matches=(*SCHEDULER.matches,
             ("claim-write", CLAIM_WRITE, 25, False),
             ("claim-watch", {"verbs": ["watch"], "resources": ["resourceclaims"]}, 10, True),
             ("slice-watch", {"verbs": ["watch"], "resources": ["resourceslices"]}, 4, True)),
    writes=(*SCHEDULER.writes, "claim-write"),
    resent_writes=(*SCHEDULER.resent_writes, "claim-write"),
    # skew: the claims held until a pod is seen bound (the scheduler's own allocation arrives after the Binding
    # it made: its assume cache must cover it), the slices until a node event passes
    hold_until={**SCHEDULER.hold_until,
                "claim-watch": {"resource": "pods", "events": {"types": ["MODIFIED"], "hasNodeName": True}},
                "slice-watch": {"resource": "nodes"}},
    trial_does=SCHEDULER.trial_does,
)
DEVICE_RESOURCES = frozenset({"resourceclaims", "resourceslices"})  # what only a device workload's trial brings


def of(target: str, shapes: Sequence[str] = ()) -> Waist:
    """The waist of a search target; kube-scheduler's with a device shape among the search's `shapes` has the
    ResourceClaims' writes and watches too."""
    if target == CONTROLLER_MANAGER:
        return CONTROLLERS
    return DEVICE_SCHEDULER if target == "kube-scheduler" and set(shapes) & set(DEVICE_SHAPES) else SCHEDULER
