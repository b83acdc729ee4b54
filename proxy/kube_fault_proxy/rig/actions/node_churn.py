"""Node churn as scenario steps: a node deleted, created again under its name (a flap), cordoned, uncordoned,
resized. The rig keeps what it deleted, to create it again as it was and to tell the checker which nodes
went away (and when); a run never ends with a node of the cluster missing."""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from lightkube import ApiError, Client
from lightkube.types import PatchType

from kube_fault_proxy.kube.kubeapi import Node

Obj = dict[str, Any]
# Metadata the apiserver owns: a node created again gets its own (a new uid: a new node to every informer).
SERVER_OWNED = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "deletionTimestamp",
                "deletionGracePeriodSeconds", "selfLink")
# Taints the node lifecycle controller sets and lifts itself; a re-registered node starts without them.
LIFECYCLE_TAINTS = "node.kubernetes.io/"


def recreatable(node: Obj) -> Obj:
    """What a kubelet would register again for a node as the apiserver holds it: its name, labels, annotations,
    spec (less the lifecycle taints) and capacity; no server-owned metadata, no conditions (KWOK's)."""
    meta = {k: v for k, v in dict(node["metadata"]).items() if k not in SERVER_OWNED}
    spec = copy.deepcopy(dict(node.get("spec") or {}))
    taints = [t for t in spec.pop("taints", None) or [] if not str(t.get("key", "")).startswith(LIFECYCLE_TAINTS)]
    if taints:
        spec["taints"] = taints
    status = node.get("status") or {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": copy.deepcopy(meta), "spec": spec,
            "status": {k: copy.deepcopy(status[k]) for k in ("capacity", "allocatable") if k in status}}


def resized(node: Obj, cpu: str | None, memory: str | None, pods: int | None) -> Obj:
    """The status patch that gives a node this capacity (allocatable the same); unset values are kept."""
    change = {k: v for k, v in (("cpu", cpu), ("memory", memory), ("pods", None if pods is None else str(pods)))
              if v is not None}
    status = node.get("status") or {}
    return {"status": {key: {**dict(status.get(key) or {}), **change} for key in ("capacity", "allocatable")}}


@dataclass
class NodeChurn:
    """The node steps of one run, on one client (opened at the first step, from `connect`): what it deleted (to
    create again) and when each went."""

    connect: Callable[[], AbstractContextManager[Client]]
    deleted: dict[str, Obj] = field(default_factory=dict)  # name -> the node as it was, until it is back
    lost: dict[str, float] = field(default_factory=dict)  # name -> when (epoch s) the rig deleted it, last time
    cordoned: dict[str, float] = field(default_factory=dict)  # name -> a moment by which it was cordoned
    lock: threading.Lock = field(default_factory=threading.Lock)
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    _api: Client | None = None

    @property
    def api(self) -> Client:
        """The connection the steps use (opened on first use)."""
        if self._api is None:
            self._api = self._stack.enter_context(self.connect())
        return self._api

    def close(self) -> None:
        """Close the connection, if one was opened."""
        self._stack.close()
        self._api = None

    def delete(self, name: str) -> str:
        """Delete a node (its pods stay, bound to a node that no longer exists); what was done."""
        node: Obj = dict(self.api.get(Node, name))
        self.api.delete(Node, name)
        with self.lock:
            self.deleted[name] = recreatable(node)
            self.lost[name] = time.time()
        return f"deleted node {name}"

    def restore(self, name: str) -> str:
        """Create again a node this run deleted, as it was; what was done."""
        with self.lock:
            manifest = self.deleted.get(name)
        if manifest is None:
            raise ValueError(f"restoreNode {name}: the run did not delete that node")
        t0 = time.monotonic()
        while True:  # the delete may not have finished: a node with finalizers lingers
            try:
                self.api.create(Node.from_dict(manifest))
                break
            except ApiError as e:
                if e.status.code != 409 or time.monotonic() - t0 > 30:
                    raise
                time.sleep(0.1)
        with self.lock:
            self.deleted.pop(name, None)
        return f"created node {name} again"

    def flap(self, name: str, down: float, stop: threading.Event) -> str:
        """Delete a node and create it again `down` seconds later (sooner if the run ends)."""
        began = time.monotonic()
        self.delete(name)
        stop.wait(max(0.0, down - (time.monotonic() - began)))
        self.restore(name)
        return f"flapped node {name}: deleted, created again {time.monotonic() - began:.1f}s later"

    def cordon(self, name: str, unschedulable: bool) -> str:
        """Cordon or uncordon, as kubectl does; a cordon's moment is kept for no-bind-to-cordoned-node."""
        self.api.patch(Node, name, {"spec": {"unschedulable": True if unschedulable else None}},
                       patch_type=PatchType.MERGE)
        with self.lock:
            if unschedulable:
                self.cordoned.setdefault(name, time.time())  # after the patch: cordoned by now
            else:
                self.cordoned.pop(name, None)
        return f"{'cordoned' if unschedulable else 'uncordoned'} node {name}"

    def resize(self, name: str, cpu: str | None, memory: str | None, pods: int | None) -> str:
        """Change a node's capacity and allocatable."""
        node: Obj = dict(self.api.get(Node, name))
        patch = resized(node, cpu, memory, pods)
        self.api.patch(Node.Status, name, patch, patch_type=PatchType.MERGE)
        return f"resized node {name}: {patch['status']['capacity']}"

    def restore_all(self) -> list[str]:
        """Create again every node the run deleted and did not restore (the run is over): what was done."""
        with self.lock:
            names = sorted(self.deleted)
        return [self.restore(name) for name in names] if names else []


def resolve(name: str, held: Callable[[], Obj | None], key: str) -> str:
    """A step's node or pod: its name, or (`held`) the held Binding's, read from the trigger's journal record."""
    if name != "held":
        return name
    record = held()
    value = ((record or {}).get("request") or {}).get(key)
    if not value:
        raise ValueError(f"the held Binding's record names no {key} ({record!r})")
    return str(value)
