"""An informer on lightkube's asyncio client: list, then watch from the list's resourceVersion; relist on 410.

lightkube's watch already resumes from the last resourceVersion it saw when a watch ends (the
apiserver's timeout, a dropped connection). What it does on 410 Expired — watch again from "now" —
would miss the deletions in between, so here a 410 means a real relist: the store is replaced and
every object that vanished is reported DELETED, as client-go's reflector does. It runs as an
asyncio task (on the proxy's own loop, or under asyncio.run); cancelling the task stops it at once.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterable, Awaitable, Callable
from typing import Any

from lightkube import AsyncClient
from lightkube.types import OnErrorAction, OnErrorResult

from kube_fault_proxy.kube.kubeapi import ApiError, HTTPError, TransportError

Obj = dict[str, Any]
Key = tuple[str, str]
Handler = Callable[[str, Obj], Awaitable[None] | None]  # may be a coroutine function


def key(obj: Obj) -> Key:
    """(namespace, name); the namespace is empty for cluster-scoped objects."""
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]


def expired(e: BaseException) -> bool:
    """Whether an error is the apiserver's 410 (an ERROR event in the stream, or the HTTP status)."""
    if isinstance(e, ApiError):
        return e.status.code == 410
    response = getattr(e, "response", None)
    return response is not None and response.status_code == 410


class Informer:
    """A store that mirrors one list+watch (a resource, a namespace, selectors) and a handler that
    sees every change: ADDED, MODIFIED, DELETED."""

    def __init__(self, client: AsyncClient, resource: Any, *, namespace: str | None = None,
                 labels: dict[str, Any] | None = None, fields: dict[str, Any] | None = None,
                 on_change: Handler | None = None, server_timeout: int = 120, retry_seconds: float = 1.0) -> None:
        self.client, self.resource = client, resource
        self.scope: dict[str, Any] = {"labels": labels, "fields": fields}
        if namespace is not None:
            self.scope["namespace"] = namespace
        self.on_change = on_change or (lambda _kind, _obj: None)
        self.server_timeout, self.retry_seconds = server_timeout, retry_seconds
        self.store: dict[Key, Obj] = {}
        self.relists = 0
        self.resource_version = ""

    async def _tell(self, kind: str, obj: Obj) -> None:
        outcome = self.on_change(kind, obj)
        if inspect.isawaitable(outcome):
            await outcome

    async def relist(self) -> str:
        """List afresh; report what appeared, changed or vanished; returns the list's resourceVersion."""
        listing = self.client.list(self.resource, **self.scope)
        fresh = {key(obj): obj async for obj in listing}
        self.relists += 1
        old, self.store = self.store, fresh
        self.resource_version = listing.resourceVersion
        for k in old.keys() - fresh.keys():
            await self._tell("DELETED", old[k])
        for k, obj in fresh.items():
            if k not in old:
                await self._tell("ADDED", obj)
            elif old[k]["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                await self._tell("MODIFIED", obj)
        return self.resource_version

    async def apply(self, kind: str, obj: Obj) -> None:
        """One watch event into the store, then to the handler."""
        self.resource_version = obj["metadata"].get("resourceVersion") or self.resource_version
        if kind == "BOOKMARK":
            return
        if kind == "DELETED":
            self.store.pop(key(obj), None)
        else:
            self.store[key(obj)] = obj
        await self._tell(kind, obj)

    def _on_error(self, e: Exception, attempts: int) -> OnErrorResult:
        # 410 and every other apiserver answer go up to run(); a transport error is retried by
        # lightkube from the last resourceVersion, after a pause.
        if isinstance(e, TransportError) and not expired(e):
            return OnErrorResult(OnErrorAction.RETRY, sleep=min(self.retry_seconds * attempts, 10.0))
        return OnErrorResult(OnErrorAction.RAISE)

    def events(self) -> AsyncIterable[tuple[str, Obj]]:
        """The watch from the current resourceVersion (endless: lightkube re-watches when one ends)."""
        return self.client.watch(self.resource, resource_version=self.resource_version,
                                 server_timeout=self.server_timeout, on_error=self._on_error, **self.scope)

    async def run(self) -> None:
        """List, then watch, relisting on 410, until the task is cancelled (or another error is raised)."""
        await self.relist()
        while True:
            try:
                async for kind, obj in self.events():
                    await self.apply(kind, obj)
            except HTTPError as e:
                if not expired(e):
                    raise
                await self.relist()
