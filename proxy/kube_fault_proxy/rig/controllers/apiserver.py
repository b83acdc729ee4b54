"""The workload objects read straight from the apiserver (never through the proxy): a snapshot for `check`,
and a Recorder that watches them for a whole run, so a breach that lasted a second is in its history."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from lightkube import Client
from lightkube.generic_resource import create_namespaced_resource

from kube_fault_proxy.kube.informer import Informer
from kube_fault_proxy.kube.kubeapi import Kube, Node, Pod
from kube_fault_proxy.rig.controllers.world import World
from kube_fault_proxy.rig.invariants.history import Change, History, slim

RESOURCES: dict[str, Any] = {
    "Pod": Pod, "Node": Node,
    "ReplicaSet": create_namespaced_resource("apps", "v1", "ReplicaSet", "replicasets"),
    "Deployment": create_namespaced_resource("apps", "v1", "Deployment", "deployments"),
    "StatefulSet": create_namespaced_resource("apps", "v1", "StatefulSet", "statefulsets"),
    "DaemonSet": create_namespaced_resource("apps", "v1", "DaemonSet", "daemonsets"),
    "Job": create_namespaced_resource("batch", "v1", "Job", "jobs"),
}


CLUSTER_SCOPED = ("Node", "ResourceSlice")


def _scopes(kind: str, namespaces: Iterable[str]) -> list[str | None]:
    """Where to list a kind: nodes (and slices) cluster-wide; the rest in each namespace given, else in all ('*')."""
    return [None] if kind in CLUSTER_SCOPED else (list(namespaces) or ["*"])


def snapshot(client: Client, namespaces: Iterable[str] = ()) -> World:
    """Every workload object (in these namespaces, all if none) and every node, as they are now."""
    namespaces = list(namespaces)
    objects: list[tuple[str, dict[str, Any]]] = []
    for kind, resource in RESOURCES.items():
        for ns in _scopes(kind, namespaces):
            listing = client.list(resource) if ns is None else client.list(resource, namespace=ns)
            objects += [(kind, slim(o)) for o in listing]
    return World(objects)


class Recorder:
    """Watches pods, the workload kinds and nodes from the apiserver on a thread of its own, for as long as
    the `with` block lasts; `history` holds every change seen (the first lists' objects as ADDED). Other kinds
    (DRA's claims and slices, PodGroups) with `resources`: kind -> lightkube resource."""

    def __init__(self, kube: Kube, namespaces: Iterable[str] = (), timeout: float = 30.0,
                 resources: Mapping[str, Any] = RESOURCES) -> None:
        self.kube, self.namespaces, self.timeout = kube, list(namespaces), timeout
        self.resources = dict(resources)
        self.history = History()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._informers: list[Informer] = []
        self._thread = threading.Thread(target=self._run, daemon=True, name="history-recorder")
        self._failed: BaseException | None = None

    def _seen(self, kind: str) -> Any:
        def tell(event: str, obj: dict[str, Any]) -> None:
            with self._lock:
                self.history.changes.append(Change(time.time(), kind, event, slim(obj)))
        return tell

    def _run(self) -> None:
        async def main() -> None:
            async with self.kube.async_client() as client:
                self._informers = [Informer(client, resource, namespace=ns, on_change=self._seen(kind))
                                   for kind, resource in self.resources.items()
                                   for ns in _scopes(kind, self.namespaces)]
                await asyncio.gather(*(i.run() for i in self._informers))

        self._loop = asyncio.new_event_loop()
        try:
            self._task = self._loop.create_task(main())
            self._loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        except BaseException as e:  # reported by synced() and the exit
            self._failed = e
        finally:
            self._loop.close()

    def synced(self) -> bool:
        """Every informer has made its first list."""
        if self._failed is not None:
            raise RuntimeError(f"the history recorder failed: {self._failed!r}") from self._failed
        return bool(self._informers) and all(i.relists for i in self._informers)

    def __enter__(self) -> Recorder:
        self.history.start = time.time()
        self._thread.start()
        deadline = time.monotonic() + self.timeout
        while not self.synced():
            if time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"the history recorder had not listed everything after {self.timeout:g}s")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop has closed already (its informers failed)
                loop.call_soon_threadsafe(task.cancel)
        self._thread.join(10)
        self.history.end = time.time()
        if self._failed is not None:
            raise RuntimeError(f"the history recorder failed: {self._failed!r}") from self._failed
