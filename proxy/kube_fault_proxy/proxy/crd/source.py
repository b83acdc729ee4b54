"""`serve --profiles-from-cluster`: list and watch FaultProfiles and FaultActivations in one namespace,
apply them on the proxy's own loop, and write this proxy's entry in each activation's status.

The proxy talks to the apiserver on a connection of its own, straight to the upstream with the
upstream kubeconfig's credentials: its requests never pass through its own fault rules. Each kind
has an informer (list, watch from the list's resourceVersion, relist on 410); any other failure
restarts that informer with a backoff, and a restart relists, so nothing that happened meanwhile
is missed. `ACCESS` is everything it asks the apiserver for; deploy/rbac.yaml grants exactly that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from lightkube import AsyncClient
from lightkube.generic_resource import create_namespaced_resource
from lightkube.types import PatchType

from kube_fault_proxy.kube.informer import Informer
from kube_fault_proxy.kube.kubeapi import ApiError, HTTPError, Kube
from kube_fault_proxy.proxy.crd import API_VERSION, GROUP, VERSION
from kube_fault_proxy.proxy.crd.objects import ACTIVATION_KIND, Condition
from kube_fault_proxy.proxy.crd.reconciler import APPLIED, Key, ProxyIdentity, Reconciler, rfc3339
from kube_fault_proxy.proxy.crd.status import StatusThrottle, Write, as_entry
from kube_fault_proxy.proxy.profiles.profile import KIND as PROFILE_KIND
from kube_fault_proxy.proxy.runtime import Runtime

log = logging.getLogger(__name__)
FaultProfileObject = create_namespaced_resource(GROUP, VERSION, PROFILE_KIND, "faultprofiles")
FaultActivationObject = create_namespaced_resource(GROUP, VERSION, ACTIVATION_KIND, "faultactivations")
# (API group, resource, verbs): every request the source makes; the Role in deploy/ grants exactly these.
ACCESS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (GROUP, "faultprofiles", ("list", "watch")),
    (GROUP, "faultactivations", ("list", "watch")),
    (GROUP, "faultactivations/status", ("patch",)),
)
TICK_SECONDS = 1.0  # TTLs, control-plane overrides and counters are looked at this often
MAX_BACKOFF_SECONDS = 30.0


def describe_error(e: BaseException) -> str:
    """An apiserver refusal by its code and reason, anything else by its type and message."""
    if isinstance(e, ApiError):
        return f"{e.status.code} {e.status.reason}: {e.status.message}"
    return f"{type(e).__name__}: {e}"


class _Informer(Informer):
    """An informer that counts its relists and the watch errors that caused them."""

    def __init__(self, client: AsyncClient, resource: Any, namespace: str, on_change: Callable[[str, Any], None],
                 on_relist: Callable[[], None]) -> None:
        super().__init__(client, resource, namespace=namespace, on_change=on_change)
        self._on_relist = on_relist

    async def relist(self) -> str:
        rv = await super().relist()
        self._on_relist()
        return rv


class ClusterSource:
    """Two informers, a reconcile loop and a status writer, as tasks on the running loop."""

    def __init__(self, kube: Kube, runtime: Runtime, identity: ProxyIdentity, namespace: str,
                 status_interval: float = 5.0, wall: Callable[[], float] = time.time,
                 retry_seconds: float = 1.0) -> None:
        self.kube = kube
        self.runtime = runtime
        self.identity = identity
        self.namespace = namespace
        self.field_manager = f"kube-fault-proxy/{identity.name}"[:128]
        self.reconciler = Reconciler(runtime, identity, wall)
        self.throttle = StatusThrottle(identity.name, status_interval)
        self._wall = wall
        self.retry_seconds = retry_seconds
        self._client: AsyncClient | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._dirty = asyncio.Event()
        self.synced = asyncio.Event()
        # statusWritesGone: the activation was deleted before its status write (a race, or a missed
        # DELETED event the next relist finds); statusWriteErrors: every other failed write, of which
        # statusWriteRefusals were answered by the apiserver (a 403, a 422), the rest never answered.
        self.counts = {"relists": 0, "watchErrors": 0, "statusWrites": 0, "statusWritesGone": 0,
                       "statusWriteErrors": 0, "statusWriteRefusals": 0}
        self.last_error: str | None = None
        self.profiles: Informer | None = None
        self.activations: Informer | None = None
        self._desired: dict[Key, Any] = {}  # the last reconcile's status entries

    def _changed(self, _kind: str, _obj: Any) -> None:
        self._dirty.set()

    def _relisted(self) -> None:
        self.counts["relists"] += 1
        self._dirty.set()

    async def start(self) -> None:
        """Start listing and watching (returns at once; `synced` is set after both first lists)."""
        # HTTP/1.1, a connection per request in flight: on one HTTP/2 connection, httpcore lets a
        # stream's reader hold the connection's read lock while it waits on the socket, so a status
        # patch whose answer had already arrived waited behind an idle watch (seen on the real
        # apiserver: the patch task parked in aread, its stream's events queued, for as long as
        # neither watch got an event). Two watches and the patches: three connections.
        self._client = client = self.kube.async_client(http2=False)
        self.profiles = _Informer(client, FaultProfileObject, self.namespace, self._changed, self._relisted)
        self.activations = _Informer(client, FaultActivationObject, self.namespace, self._changed, self._relisted)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._keep(self.profiles, "faultprofiles"), name="cluster-profiles"),
                       loop.create_task(self._keep(self.activations, "faultactivations"), name="cluster-activations"),
                       loop.create_task(self._loop(), name="cluster-reconcile")]

    async def _keep(self, informer: Informer, resource: str) -> None:
        """Run an informer for good: any error but a 410 (the informer relists on those itself) ends
        it; it starts again, with a relist, after a backoff."""
        backoff = self.retry_seconds
        while True:
            relists = informer.relists
            try:
                await informer.run()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the apiserver gone, a 403, a broken stream: retry, say so
                self.counts["watchErrors"] += 1
                self.last_error = f"{resource}: {describe_error(e)}"[:1000]
                self.runtime.counters.note("cluster-watch-error", resource=resource, error=self.last_error)
                if informer.relists > relists:
                    backoff = self.retry_seconds
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)

    def _ready(self) -> bool:
        return (self.profiles is not None and self.activations is not None
                and self.profiles.relists > 0 and self.activations.relists > 0)

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._dirty.wait(), TICK_SECONDS)
            self._dirty.clear()
            if not self._ready():
                continue
            assert self.profiles is not None and self.activations is not None
            try:
                desired = self.reconciler.sync(self.profiles.store, self.activations.store)
            except Exception:  # a bug here must not end the source; the proxy keeps its state
                log.exception("reconciling FaultActivations failed")
                continue
            self.synced.set()
            self._desired = desired
            for write in self.throttle.due(desired, self.activations.store, self._wall()):
                try:
                    await self._write(write)
                except Exception as e:  # what the client was not expected to raise: the loop goes on
                    self.counts["statusWriteErrors"] += 1
                    self.last_error = f"status of {write.key[0]}/{write.key[1]}: {describe_error(e)}"[:1000]
                    log.exception("writing the status of FaultActivation %s/%s failed", *write.key)

    async def _write(self, write: Write) -> bool:
        assert self._client is not None
        body = {"apiVersion": API_VERSION, "kind": ACTIVATION_KIND,
                "metadata": {"name": write.key[1], "namespace": write.key[0]},
                "status": {"proxies": [write.entry]} if write.entry is not None else {}}
        try:
            await self._client.patch(FaultActivationObject.Status, write.key[1], body, namespace=write.key[0],
                                     patch_type=PatchType.APPLY, field_manager=self.field_manager, force=True)
        except (ApiError, HTTPError) as e:
            if isinstance(e, ApiError) and e.status.code == 404:
                self.counts["statusWritesGone"] += 1
                return False
            self.counts["statusWriteErrors"] += 1
            self.counts["statusWriteRefusals"] += isinstance(e, ApiError)
            self.last_error = f"status of {write.key[0]}/{write.key[1]}: {describe_error(e)}"[:1000]
            log.warning("could not write the status of FaultActivation %s/%s: %s", *write.key, describe_error(e))
            return False
        self.counts["statusWrites"] += 1
        self.throttle.wrote(write, self._wall())
        return True

    async def stop(self, timeout: float = 3.0) -> None:
        """Stop watching; mark the activation this proxy runs as no longer active (within `timeout`)."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._say_stopped(), timeout)
        if self._client is not None:
            await self._client.close()

    async def _say_stopped(self) -> None:
        applied = self.reconciler.applied
        if applied is None or self.activations is None or applied.key not in self.activations.store:
            return
        uid = self.activations.store[applied.key]["metadata"].get("uid", "")
        if uid != applied.uid:
            return
        status = self._desired.get(applied.key)
        if status is None:
            return
        stopped = Condition(type=APPLIED, status="False", reason="ProxyStopped",
                            message="the proxy stopped; it applies the activation again when it starts",
                            lastTransitionTime=rfc3339(self._wall()))
        entry = as_entry(status.model_copy(update={"active": False, "conditions": [stopped]}))
        await self._write(Write(applied.key, uid, entry))

    def describe(self) -> dict[str, Any]:
        """The source's state, for GET /v1/cluster."""
        return {"namespace": self.namespace, "proxyName": self.identity.name, "labels": dict(self.identity.labels),
                "server": self.kube.server, "synced": self.synced.is_set(), **self.counts,
                "lastError": self.last_error, **self.reconciler.describe(),
                "objects": {"faultprofiles": len(self.profiles.store) if self.profiles else 0,
                            "faultactivations": len(self.activations.store) if self.activations else 0}}


__all__ = ["ACCESS", "ClusterSource", "FaultActivationObject", "FaultProfileObject", "Key", "ProxyIdentity"]
