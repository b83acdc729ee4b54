"""The cluster source on a fake lightkube client: lists, watches, relists after 410, restarts after
other errors, and writes status by server-side apply as this proxy's own field manager."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from kube_fault_proxy.kube.kubeapi import ApiError, TransportError
from kube_fault_proxy.proxy.crd import API_VERSION
from kube_fault_proxy.proxy.crd.reconciler import ProxyIdentity, rfc3339
from kube_fault_proxy.proxy.crd.source import ClusterSource, FaultActivationObject, FaultProfileObject
from kube_fault_proxy.proxy.journal import Journal
from kube_fault_proxy.proxy.profiles.library import Library
from kube_fault_proxy.proxy.runtime import Runtime
from lightkube.models.meta_v1 import Status
from lightkube.types import PatchType

from tests.support.builders import BIND_MATCH, Listing

EXPIRED = ApiError(status=Status(code=410, reason="Expired", message="too old resource version: 1 (20)"))
FORBIDDEN = ApiError(status=Status(code=403, reason="Forbidden", message="no"))
GONE = ApiError(status=Status(code=404, reason="NotFound", message="not found"))


def meta(name: str, rv: int, uid: str | None = None) -> dict[str, Any]:
    return {"name": name, "namespace": "ns", "uid": uid or f"uid-{name}", "generation": 1,
            "resourceVersion": str(rv), "creationTimestamp": rfc3339(1_800_000_000)}


def fail_profile(rv: int = 1, status: int = 500) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "FaultProfile", "metadata": meta("fail", rv),
            "spec": {"rules": [{"name": "r", "match": BIND_MATCH, "fault": {"abort": {"status": status}}}]}}


def activation(rv: int = 2) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "FaultActivation", "metadata": meta("act", rv),
            "spec": {"profile": "fail"}}




class FakeClient:
    """Scripted lists and watches per resource; a watch with no script left waits forever."""

    def __init__(self, lists: dict[Any, list[Any]], watches: dict[Any, list[list[Any]]]) -> None:
        self.lists, self.watches = lists, watches
        self.calls: list[tuple[str, str]] = []
        self.patches: list[dict[str, Any]] = []
        self.patch_errors: list[Exception] = []  # raised by the next patches, in order
        self.closed = False

    def list(self, resource: Any, **scope: Any) -> Listing:
        assert scope["namespace"] == "ns"
        self.calls.append(("list", resource._api_info.plural))
        script = self.lists[resource]
        step = script.pop(0) if len(script) > 1 else script[0]
        if isinstance(step, Exception):
            raise step
        return Listing(*step)

    async def watch(self, resource: Any, *, resource_version: str, **_: Any) -> AsyncIterator[tuple[str, Any]]:
        self.calls.append(("watch", f"{resource._api_info.plural}@{resource_version}"))
        script = self.watches[resource]
        events = script.pop(0) if script else []
        for event in events:
            await asyncio.sleep(0)
            if isinstance(event, Exception):
                raise event
            yield event
        await asyncio.Event().wait()

    async def patch(self, resource: Any, name: str, obj: Any, **params: Any) -> Any:
        self.calls.append(("patch", f"{resource._api_info.plural}/{resource._api_info.action}"))
        if self.patch_errors:
            raise self.patch_errors.pop(0)
        self.patches.append({"resource": resource, "name": name, "obj": obj, **params})
        return obj

    async def close(self) -> None:
        self.closed = True


class FakeKube:
    server = "https://apiserver.test"

    def __init__(self, client: FakeClient) -> None:
        self._client = client

    def async_client(self, http2: bool = False) -> FakeClient:
        assert not http2  # one connection per request in flight (see ClusterSource.start)
        return self._client


def run(client: FakeClient, steps: Callable[[ClusterSource, Runtime], Any]) -> tuple[ClusterSource, Runtime]:
    runtime = Runtime(Library(), Journal(None, lambda: 0.0), lambda: 0.0, lambda: 0.0)

    async def scenario() -> None:
        source = ClusterSource(FakeKube(client), runtime, ProxyIdentity("proxy-a"), "ns",  # type: ignore[arg-type]
                               status_interval=5.0, retry_seconds=0.01)
        await source.start()
        try:
            await steps(source, runtime)
        finally:
            await source.stop()
        holder.append(source)

    holder: list[ClusterSource] = []
    asyncio.run(asyncio.wait_for(scenario(), 20))
    return holder[0], runtime


async def until(what: str, check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def test_list_apply_and_write_status_as_this_proxy() -> None:
    client = FakeClient({FaultProfileObject: [([fail_profile()], "10")], FaultActivationObject: [([activation()], "10")]},
                        {FaultProfileObject: [], FaultActivationObject: []})

    async def steps(source: ClusterSource, runtime: Runtime) -> None:
        await until("applied", lambda: runtime.activations.active is not None and bool(client.patches))

    source, _runtime = run(client, steps)
    patch = client.patches[0]
    assert patch["resource"] is FaultActivationObject.Status
    assert (patch["name"], patch["namespace"], patch["patch_type"], patch["field_manager"], patch["force"]) == (
        "act", "ns", PatchType.APPLY, "kube-fault-proxy/proxy-a", True)
    [entry] = patch["obj"]["status"]["proxies"]
    assert (entry["name"], entry["active"], entry["epoch"]) == ("proxy-a", True, 1)
    stopped = client.patches[-1]["obj"]["status"]["proxies"][0]  # on stop: no longer active here
    assert (stopped["active"], stopped["conditions"][0]["reason"]) == (False, "ProxyStopped")
    assert source.counts["statusWrites"] == len(client.patches) == 2
    assert {kind for kind, _ in client.calls} == {"list", "watch", "patch"}
    assert {what.split("@")[0] for kind, what in client.calls} == {
        "faultprofiles", "faultactivations", "faultactivations/status"}
    assert client.closed


def test_a_deletion_missed_by_the_watch_is_found_by_the_relist_after_410() -> None:
    client = FakeClient(
        {FaultProfileObject: [([fail_profile()], "10")],
         FaultActivationObject: [([activation()], "10"), ([], "30")]},  # the second list: it is gone
        {FaultProfileObject: [], FaultActivationObject: [[("MODIFIED", {**activation(rv=12)}), EXPIRED]]})

    async def steps(source: ClusterSource, runtime: Runtime) -> None:
        await until("relisted and passing through", lambda: source.counts["relists"] >= 3 and runtime.activations.active is None)

    source, runtime = run(client, steps)
    assert ("watch", "faultactivations@10") in client.calls and ("watch", "faultactivations@30") in client.calls
    events = [r["event"] for r in runtime.journal.since(0)]
    assert events == ["activate", "deactivate"]
    assert source.counts["watchErrors"] == 0  # a 410 is the informer's own business


def test_another_error_restarts_the_informer_with_a_relist_and_is_journaled() -> None:
    client = FakeClient(
        {FaultProfileObject: [([], "10"), ([fail_profile(rv=11, status=503)], "20")],
         FaultActivationObject: [([activation()], "10")]},
        {FaultProfileObject: [[FORBIDDEN]], FaultActivationObject: []})

    async def steps(source: ClusterSource, runtime: Runtime) -> None:
        await until("the profile from the second list applied", lambda: runtime.activations.active is not None)

    source, runtime = run(client, steps)
    assert source.counts["watchErrors"] == 1
    [error] = [r for r in runtime.journal.since(0) if r["event"] == "cluster-watch-error"]
    assert (error["resource"], error["error"]) == ("faultprofiles", "faultprofiles: 403 Forbidden: no")
    first = client.patches[0]["obj"]["status"]["proxies"][0]["conditions"][0]
    assert first["reason"] == "ProfileNotFound"  # before the restart, the activation named a missing profile


def test_an_invalid_object_from_the_watch_is_reported_and_changes_nothing() -> None:
    broken = fail_profile(rv=15)
    broken["spec"]["rules"][0]["fault"] = {"abort": {"status": 500}, "reset": {}}
    client = FakeClient({FaultProfileObject: [([fail_profile()], "10")], FaultActivationObject: [([activation()], "10")]},
                        {FaultProfileObject: [[("MODIFIED", broken)]], FaultActivationObject: []})

    async def steps(source: ClusterSource, runtime: Runtime) -> None:
        await until("the invalid profile reported", lambda: any(
            p["obj"]["status"]["proxies"][0]["conditions"][0]["reason"] == "InvalidProfile" for p in client.patches))

    _source, runtime = run(client, steps)
    assert [r["event"] for r in runtime.journal.since(0)] == ["activate", "cluster-profile-invalid"]
    assert runtime.activations.active is not None and runtime.activations.active.engine.epoch == 1  # the old profile stays


def test_failed_status_writes_are_told_apart_and_retried() -> None:
    """A 404 (the activation went meanwhile) is not an error; a refusal, an exception the client was not
    expected to raise and a lost connection are, and only the refusal was answered by the apiserver;
    none ends the loop, and the entry is written at a later tick."""
    client = FakeClient({FaultProfileObject: [([fail_profile()], "10")], FaultActivationObject: [([activation()], "10")]},
                        {FaultProfileObject: [], FaultActivationObject: []})
    client.patch_errors = [GONE, FORBIDDEN, ValueError("unexpected"), TransportError("connection closed")]

    async def steps(source: ClusterSource, runtime: Runtime) -> None:
        await until("written after three failures", lambda: bool(client.patches), timeout=10)

    source, _runtime = run(client, steps)
    counts = {k: source.counts[k] for k in ("statusWrites", "statusWritesGone", "statusWriteErrors",
                                            "statusWriteRefusals")}
    assert counts == {"statusWrites": 2, "statusWritesGone": 1, "statusWriteErrors": 3, "statusWriteRefusals": 1}
    assert source.last_error == "status of ns/act: TransportError: connection closed"
