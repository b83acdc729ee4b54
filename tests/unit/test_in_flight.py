"""The writes in flight (proxy.mitm.in_flight) driven with mitmproxy's own test flows through the fault addon, no
network: which writes a cut lists, and how a create's body names its pod and controller (JSON or protobuf)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from kube_fault_proxy.proxy.mitm.addon import FaultAddon
from kube_fault_proxy.proxy.mitm.in_flight import InFlightTracking, WritesInFlight
from kube_fault_proxy.proxy.written import requested, written
from mitmproxy import http
from mitmproxy.addons import proxyserver
from mitmproxy.test import taddons, tflow

from tests.support.builders import profile
from tests.support.mitm import JSON, answer, events, exchange, flow, flow_hooks, runtime
from tests.unit.test_addon import _proto

PROTOBUF = (b"content-type", b"application/vnd.kubernetes.protobuf")
OWNER = {"kind": "ReplicaSet", "name": "web", "uid": "rs-uid"}


def json_pod(**meta: Any) -> bytes:
    refs = [{"kind": "ReplicaSet", "name": "other", "uid": "x-uid"}, {**OWNER, "controller": True}]
    return json.dumps({"kind": "Pod", "apiVersion": "v1", "metadata": {**meta, "ownerReferences": refs},
                       "spec": {"containers": [{"name": "c", "image": "i"}]}}).encode()


def proto_pod(*meta: tuple[int, bytes | int]) -> bytes:
    """A pod create's protobuf body as client-go sends it: `k8s\\0`, runtime.Unknown{typeMeta, raw: Pod{metadata}}."""
    owner = _proto((1, b"ReplicaSet"), (3, b"web"), (4, b"rs-uid"), (5, b"apps/v1"), (6, 1))
    return b"k8s\x00" + _proto((1, _proto((1, b"v1"), (2, b"Pod"))), (2, _proto((1, _proto(*meta, (13, owner))))))


def test_a_create_request_names_its_generate_name_and_controller() -> None:
    ctype = "application/json"
    assert requested(ctype, json_pod(generateName="web-", namespace="w")) == {
        "generateName": "web-", "namespace": "w", "owner": OWNER}
    assert requested(ctype, json_pod(name="db-0")) == {"name": "db-0", "owner": OWNER}
    assert requested("application/vnd.kubernetes.protobuf", proto_pod((2, b"web-"), (3, b"w"))) == {
        "generateName": "web-", "namespace": "w", "owner": OWNER}
    assert requested(ctype, json.dumps({"kind": "Pod", "metadata": {}}).encode()) is None  # neither name
    assert requested(ctype, b"{not json") is None and requested("text/plain", b"x") is None
    # An answer still needs a name: generateName alone is not the object written.
    assert written("application/vnd.kubernetes.protobuf", proto_pod((2, b"web-"), (3, b"w"))) is None


def run_chain(tmp_path: Path, test: Any) -> None:
    """The fault addon with resetUpstream on `/reset-now`, then the writes in flight, last in the chain."""
    rt = runtime(tmp_path, profile({"name": "r", "match": {"paths": ["/reset-now"]}, "fault": {"resetUpstream": {}}},
                                   name="p", seed=1))
    rt.activations.activate("p")

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            in_flight = WritesInFlight()
            await test(rt, [FaultAddon(rt, None, in_flight), InFlightTracking(in_flight)], in_flight)

    asyncio.run(main())


def test_a_reset_journals_the_writes_forwarded_on_its_connection_and_not_yet_answered(tmp_path: Path) -> None:
    async def test(rt: Any, chain: list[Any], in_flight: WritesInFlight) -> None:
        a, b = tflow.tclient_conn(), tflow.tclient_conn()
        sent = [flow("POST", "/api/v1/namespaces/w/pods", json_pod(generateName="web-"), [JSON], a),
                flow("POST", "/api/v1/namespaces/w/pods", proto_pod((2, b"web-")), [PROTOBUF], a),
                flow("PATCH", "/api/v1/namespaces/w/pods/web-a/status", b"{}", [JSON], a),
                flow("POST", "/api/v1/namespaces/w/configmaps", b"{}", [JSON], b),  # another connection
                flow("GET", "/api/v1/namespaces/w/pods", client=a)]  # a read: never listed
        for f in sent:
            await flow_hooks(chain, f, "requestheaders", "request")
        answered = flow("POST", "/api/v1/namespaces/w/pods", json_pod(generateName="web-"), [JSON], a)
        await exchange(chain, answered, answer(201, json_pod(name="web-x", namespace="w")))
        failed = flow("DELETE", "/api/v1/namespaces/w/pods/web-b", client=a)
        await exchange(chain, failed, None)  # its upstream connection dropped: an error ends it
        assert len(in_flight) == 4
        trigger = flow("GET", "/reset-now", client=a)
        await flow_hooks(chain, trigger, "requestheaders", "request")
        assert trigger.error is not None
        [inject] = events(rt, "inject")
        assert inject["fault"] == "resetUpstream" and inject["inFlight"] == [
            {"verb": "create", "resource": "pods", "namespace": "w", "generateName": "web-", "owner": OWNER},
            {"verb": "create", "resource": "pods", "namespace": "w", "generateName": "web-", "owner": OWNER},
            {"verb": "patch", "resource": "pods", "subresource": "status", "namespace": "w", "name": "web-a"}]
        # Every connection (an outage's cut): the other client's write too, the answered ones still not.
        assert [(w["verb"], w["resource"]) for w in in_flight.cut()] == [
            ("create", "pods"), ("create", "pods"), ("patch", "pods"), ("create", "configmaps")]

    run_chain(tmp_path, test)


def test_a_write_answered_by_the_proxy_or_whose_commit_is_journaled_is_not_in_flight(tmp_path: Path) -> None:
    async def test(rt: Any, chain: list[Any], in_flight: WritesInFlight) -> None:
        mine = flow("POST", "/api/v1/namespaces/w/pods", b"{}", [JSON])
        mine.response = http.Response.make(503)  # an abort: answered in its request hook, never forwarded
        killed = flow("POST", "/api/v1/namespaces/w/pods", b"{}", [JSON])
        killed.kill()
        held = flow("POST", "/api/v1/namespaces/w/pods", b"{}", [JSON])
        for f in (mine, killed, held):
            await flow_hooks(chain, f, "request")
        assert len(in_flight) == 1
        held.metadata["kfp.after"] = ()  # a crash point holds its committed answer: its inject counts it
        held.response = answer(201)
        assert in_flight.cut() == []

    run_chain(tmp_path, test)
