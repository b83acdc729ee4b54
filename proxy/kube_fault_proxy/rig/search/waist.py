"""A search target's narrow waist: the requests its grammar draws rules on, the request a count trigger counts,
and the writes a write fault acts on. A scheduler's waist is its Bindings; kube-controller-manager's is the pods
its workload controllers create and delete, their status writes and the watches their caches are fed by.

Pure data: the grammar (grammar.py) and the pre-check (precheck.py) read a Waist; nothing here runs anything."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
    view_matches: dict[str, tuple[str, ...]]  # a view kind -> the match names it is drawn on
    writes: tuple[str, ...]  # the match names commitThenFail is drawn on
    hold_until: dict[str, Selector]  # holdEvents on this match -> the other watch's event that releases it
    no_kinds: tuple[str, ...] = ()  # kinds this target's trial cannot run (and why, in `refused`)
    refused: str = ""

    def names(self) -> tuple[str, ...]:
        """The match names, in draw order."""
        return tuple(m[0] for m in self.matches)


# The weights follow notes/fault-search.md §4.1.
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
    # so staleList is drawn on watches (it acts on their WatchList relists); delayEvents and holdEvents on the
    # watches; a write kind on the writes a trial's workload makes.
    view_matches={"staleList": ("pod-watch", "node-watch"), "coalesceEvents": ("pod-watch", "node-watch"),
                  "crashPoint": ("binding", "pod-write"), "delayEvents": ("pod-watch", "node-watch"),
                  "failThenCommit": ("binding", "pod-write"), "holdEvents": ("node-watch", "pod-watch")},
    writes=("binding", "pod-write"),
    # skew: the node watch held until a pod is seen bound; the pod watch until a node event passes
    hold_until={"node-watch": {"resource": "pods", "events": {"types": ["MODIFIED"], "hasNodeName": True}},
                "pod-watch": {"resource": "nodes"}},
)

# kube-controller-manager's workload controllers (replicaset, deployment, job, statefulset, daemonset): they
# create and delete pods, write their objects' status (Jobs also patch their pods' finalizers), and act on what
# their informers show them. The pod watch and the workloads' watches are separate streams: holdEvents skews
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
    view_matches={"staleList": ("pod-watch", "workload-watch"), "coalesceEvents": ("pod-watch", "workload-watch"),
                  "delayEvents": ("pod-watch", "workload-watch"),
                  "failThenCommit": ("pod-create", "pod-delete", "status-write"),
                  "holdEvents": ("pod-watch", "workload-watch")},
    writes=("pod-create", "pod-delete", "status-write", "pod-write"),
    hold_until={"pod-watch": {"resource": "replicasets"},
                "workload-watch": {"resource": "pods", "events": {"types": ["ADDED"]}}},
    no_kinds=("crashPoint",),
    refused="a crash point kills the scheduler; a kube-controller-manager trial does not kill its target",
)


def of(target: str) -> Waist:
    """The waist of a search target."""
    return CONTROLLERS if target == CONTROLLER_MANAGER else SCHEDULER
