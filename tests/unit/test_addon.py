"""The fault addon (proxy.mitm.addon) driven with mitmproxy's own test flows, no network: what the
client gets, what reaches the upstream, what is counted and journaled."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.proxy.mitm.binds import BindAccounting, BindOutcomes, BindReads
from kube_fault_proxy.proxy.mitm.crash_points import CrashPoints
from kube_fault_proxy.proxy.mitm.held import HeldAnswers
from kube_fault_proxy.proxy.mitm.outage import OutageController, OutageStarts, OutageState
from kube_fault_proxy.proxy.mitm.patches import internals
from kube_fault_proxy.proxy.mitm.timeouts import ConnectionTimeouts
from kube_fault_proxy.proxy.runtime import Runtime
from mitmproxy import http
from mitmproxy.addons import proxyserver
from mitmproxy.connection import ConnectionState
from mitmproxy.test import taddons, tflow

from tests.support.builders import BIND_MATCH, profile
from tests.support.mitm import JSON, Faults, answer, binding, events, exchange, flow, flow_hooks, runtime

WATCH_MATCH = {"verbs": ["watch"], "resources": ["pods"]}


@dataclass
class Proxy:
    """The fault addon and the addons around it, in the chain order serve uses."""

    runtime: Runtime
    timeouts: ConnectionTimeouts
    outage: OutageState
    faults: Faults
    crash_points: CrashPoints
    reads: BindReads
    accounting: BindAccounting

    @classmethod
    def of(cls, rt: Runtime) -> Proxy:
        binds = BindOutcomes(rt.counters.bind_outcome)
        outage = OutageState(rt, binds)
        held = HeldAnswers()
        return cls(rt, ConnectionTimeouts(rt, 32, 90), outage, Faults.of(rt, held),
                   CrashPoints(rt.counters.note, held), BindReads(binds),
                   BindAccounting(binds))

    @property
    def chain(self) -> list[Any]:
        return [self.timeouts, self.reads, OutageController(self.outage), *self.faults.before, self.faults.addon,
                OutageStarts(self.outage), *self.faults.after, self.crash_points, self.accounting]

    async def exchange(self, f: http.HTTPFlow, upstream: http.Response | None = None) -> http.HTTPFlow:
        await exchange(self.chain, f, upstream)
        return f

    @property
    def binds(self) -> dict[str, int]:
        return dict(self.runtime.stats()["bindsTotal"])


def run(tmp_path: Path, fault: dict[str, Any] | None, test: Callable[[Proxy], Awaitable[None]],
        match: dict[str, Any] = BIND_MATCH) -> None:
    """Run a test on the loop, inside a mitmproxy context, with `fault` active on `match` (None: pass-through)."""
    rules = [{"name": "r", "match": match, "fault": fault}] if fault is not None else []
    rt = runtime(tmp_path, profile(*rules, name="p", seed=1))
    rt.activations.activate("p")

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            await test(Proxy.of(rt))

    asyncio.run(main())


# (case, fault, the upstream's answer (None: the connection dropped; (status, Retry-After) with that
# header), what the client gets, the bind outcome)
BINDINGS: list[tuple[str, dict[str, Any] | None, int | tuple[int, str] | None, int | None, str]] = [
    ("pass-through", None, 201, 201, "succeeded"),
    ("pass-through, upstream conflict", None, 409, 409, "failed"),
    ("pass-through, upstream gone", None, None, None, "failed"),
    ("pass-through, APF 429 with Retry-After", None, (429, "1"), 429, "throttled"),
    ("pass-through, 429 without Retry-After", None, 429, 429, "failed"),
    ("pass-through, 429 with a Retry-After date", None, (429, "Wed, 02 Dec 2026 05:00:00 GMT"), 429, "failed"),
    ("pass-through, 503 with Retry-After", None, (503, "1"), 503, "failed"),
    ("abort", {"abort": {"status": 500}}, 201, 500, "failed"),
    ("throttle", {"throttle": {}}, 201, 429, "throttled"),
    ("throttle as a Status", {"throttle": {"form": "status", "retryAfterSeconds": 3}}, 201, 429, "throttled"),
    ("abort 429 with Retry-After", {"abort": {"status": 429, "retryAfterSeconds": 2}}, 201, 429, "throttled"),
    ("abort 429 without Retry-After", {"abort": {"status": 429}}, 201, 429, "failed"),
    ("abort 503 with Retry-After", {"abort": {"status": 503, "retryAfterSeconds": 2}}, 201, 503, "failed"),
    ("reset", {"reset": {}}, 201, None, "failed"),
    ("commit then fail", {"commitThenFail": {"abort": {"status": 503}}}, 201, 503, "failed"),
    ("commit then reset", {"commitThenFail": {"reset": {}}}, 201, None, "failed"),
    ("commit then fail, nothing committed", {"commitThenFail": {"abort": {"status": 503}}}, 409, 409, "failed"),
    ("commit then fail, throttled upstream", {"commitThenFail": {"abort": {"status": 503}}}, (429, "1"), 429,
     "throttled"),
    ("delayed answer", {"delay": {"seconds": 0.01, "phase": "response"}}, 201, 201, "succeeded"),
    ("crash point", {"crashPoint": {"holdSeconds": 0.01}}, 201, 201, "succeeded"),
    ("crash point, nothing committed", {"crashPoint": {"holdSeconds": 0.01}}, 409, 409, "failed"),
]


def upstream_answer(upstream: int | tuple[int, str]) -> http.Response:
    """The upstream's answer: a status, or a status with that Retry-After."""
    if isinstance(upstream, int):
        return answer(upstream)
    status, retry_after = upstream
    return answer(status, headers=[(b"content-type", b"application/json"), (b"retry-after", retry_after.encode())])


@pytest.mark.parametrize(("fault", "upstream", "client_gets", "outcome"), [c[1:] for c in BINDINGS],
                         ids=[c[0] for c in BINDINGS])
def test_every_binding_is_counted_once_by_what_its_client_got(
        tmp_path: Path, fault: dict[str, Any] | None, upstream: int | tuple[int, str] | None,
        client_gets: int | None, outcome: str) -> None:
    async def test(p: Proxy) -> None:
        f = await p.exchange(binding(), upstream_answer(upstream) if upstream is not None else None)
        await flow_hooks(p.chain, f, "error")  # a late error (the client left) counts nothing more
        assert (f.response.status_code if f.response and not f.error else None) == client_gets
        assert p.binds == {k: int(outcome == k) for k in ("succeeded", "throttled", "failed")}
        assert len(p.accounting.outcomes) == 0

    run(tmp_path, fault, test)


def test_an_abort_never_reaches_the_upstream_and_is_journaled(tmp_path: Path) -> None:
    async def test(p: Proxy) -> None:
        f = binding("web-1")
        await flow_hooks(p.chain, f, "requestheaders", "request")
        assert f.response is not None and f.response.status_code == 500, "answered before forwarding"
        body = json.loads(f.response.content or b"")
        assert (body["kind"], body["code"]) == ("Status", 500)
        [inject] = events(p.runtime, "inject")
        assert (inject["rule"], inject["fault"], inject["action"]) == ("r", "abort", "respond 500")
        assert inject["request"]["name"] == "web-1"
        assert p.runtime.stats()["injectionsByFault"] == {"abort": 1}

    run(tmp_path, {"abort": {"status": 500}}, test)


def test_requests_the_rule_does_not_match_pass_through_untouched(tmp_path: Path) -> None:
    async def test(p: Proxy) -> None:
        f = await p.exchange(flow("GET", "/api/v1/namespaces/default/pods/web-1"), answer(200))
        assert f.response is not None and f.response.status_code == 200
        assert events(p.runtime, "inject") == [] and p.runtime.counters.requests == 1
        assert p.binds == {"succeeded": 0, "throttled": 0, "failed": 0}

    run(tmp_path, {"abort": {"status": 500}}, test)


def test_a_delay_holds_the_request_then_forwards_it(tmp_path: Path) -> None:
    async def test(p: Proxy) -> None:
        f = binding()
        started = time.monotonic()
        await flow_hooks(p.chain, f, "requestheaders", "request")
        assert time.monotonic() - started >= 0.05 * 0.9
        assert f.response is None and f.error is None, "still goes upstream"
        assert events(p.runtime, "inject")[0]["action"] == "wait 0.050s, then forward"

    run(tmp_path, {"delay": {"seconds": 0.05}}, test)


@pytest.mark.parametrize(("then", "client_gets"), [("timeout", 504), ("reset", None)])
def test_a_hang_with_a_duration_ends_like_the_apiserver(tmp_path: Path, then: str, client_gets: int | None) -> None:
    async def test(p: Proxy) -> None:
        f = await p.exchange(binding(), answer(201))
        assert (f.response.status_code if f.response and not f.error else None) == client_gets
        assert p.binds == {"succeeded": 0, "throttled": 0, "failed": 1}

    run(tmp_path, {"hang": {"seconds": 0.05, "then": then}}, test)


def test_a_hang_ends_when_the_client_leaves_and_answers_nothing(tmp_path: Path) -> None:
    async def test(p: Proxy) -> None:
        f = binding()
        asyncio.get_running_loop().call_later(0.05, setattr, f.client_conn, "state", ConnectionState.CLOSED)
        started = time.monotonic()
        await flow_hooks(p.chain, f, "requestheaders", "request")
        assert time.monotonic() - started < 2, "the hang ended with its client"
        assert f.response is None and f.error is None
        f.error = tflow.terr("Client disconnected.")
        await flow_hooks(p.chain, f, "error")
        assert p.binds == {"succeeded": 0, "throttled": 0, "failed": 1}

    run(tmp_path, {"hang": {}}, test)


def watch(content_type: bytes = b"application/json") -> tuple[http.HTTPFlow, http.Response]:
    f = flow("GET", "/api/v1/pods?watch=1")
    return f, answer(200, b"", [(b"content-type", content_type)])


def event(kind: str, name: str) -> bytes:
    obj = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": name, "namespace": "default"}}
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def test_a_watch_is_streamed_and_its_events_edited_whole(tmp_path: Path) -> None:
    async def test(p: Proxy) -> None:
        f, headers = watch()
        await p.exchange(f, headers)
        stream = f.response.stream if f.response else None
        assert callable(stream), "a watch with an edit fault streams through the editor"
        added, modified = event("ADDED", "a"), event("MODIFIED", "b")
        both = added + modified
        assert b"".join(stream(both[:10]) + stream(both[10:])) == added, "reassembled, the MODIFIED one dropped"
        assert stream(b"") == []
        [record] = events(p.runtime, "watch-event")
        assert (record["action"], record["type"], record["name"], record["stream"]) == ("dropped", "MODIFIED", "b", f.id)

    run(tmp_path, {"dropEvents": {"events": {"types": ["MODIFIED"]}}}, test, match=WATCH_MATCH)


PROTOBUF_WATCH = (Path(__file__).with_name("data") / "protobuf" / "watchlist-pods.pb").read_bytes()


def test_a_watch_the_editor_cannot_read_passes_untouched_and_is_noted(tmp_path: Path) -> None:
    """A protobuf watch from a client that accepts nothing else: no event is edited (dropEvents drops none of its
    frames), the bytes pass as they came (the revision log reads them, `test_revisions`), and it is journaled."""
    async def test(p: Proxy) -> None:
        f, headers = watch(b"application/vnd.kubernetes.protobuf;stream=watch")
        await p.exchange(f, headers)
        assert f.response is not None and callable(f.response.stream)
        chunks = [PROTOBUF_WATCH[i:i + 700] for i in range(0, len(PROTOBUF_WATCH), 700)]
        assert [f.response.stream(c) for c in chunks] == [[c] for c in chunks]
        [noted] = events(p.runtime, "watch-unparsable")
        assert noted["contentType"] == "application/vnd.kubernetes.protobuf;stream=watch"

    run(tmp_path, {"dropEvents": {}}, test, match=WATCH_MATCH)


def test_a_cut_after_events_closes_the_clients_upstream_connection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[str] = []
    monkeypatch.setattr(internals, "close_client_upstream", closed.append)

    async def test(p: Proxy) -> None:
        f, headers = watch()
        await p.exchange(f, headers)
        assert f.response is not None and callable(f.response.stream)
        assert f.response.stream(event("ADDED", "a")) == [event("ADDED", "a")]
        await asyncio.sleep(0)
        assert closed == [f.client_conn.id], "cut on the loop, just after the chunk"

    run(tmp_path, {"cut": {"afterEvents": 1}}, test, match=WATCH_MATCH)


def test_a_pass_through_watch_is_streamed_as_it_comes(tmp_path: Path) -> None:
    async def test(p: Proxy) -> None:
        f, headers = watch()
        await p.exchange(f, headers)
        stream = f.response.stream if f.response else None
        assert callable(stream), "streamed past the revision log (staleList), which only reads it"
        half = event("ADDED", "a")[:9]
        assert stream(half) == [half], "each chunk passed on at once and unchanged: nothing is held"
        assert stream(b"") == []

    run(tmp_path, None, test)


def test_an_outage_fails_every_binding_in_flight_and_drops_what_arrives_during_it(tmp_path: Path) -> None:
    rules = [{"name": "down", "match": {"verbs": ["get"], "resources": ["nodes"]},
              "fault": {"outage": {"seconds": 30}}}]
    rt = runtime(tmp_path, profile(*rules, name="p", seed=1))
    rt.activations.activate("p")

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            p = Proxy.of(rt)
            outage = p.outage
            in_flight = binding("early")
            await flow_hooks(p.chain, in_flight, "requestheaders", "request")  # forwarded, no answer yet
            trigger = await p.exchange(flow("GET", "/api/v1/nodes/n1"))
            assert trigger.error is not None and outage.active
            assert p.binds == {"succeeded": 0, "throttled": 0, "failed": 1}, "the one in flight failed as the outage began"
            in_flight.response = answer(201)  # the apiserver's late answer changes nothing
            await flow_hooks(p.chain, in_flight, "responseheaders", "response")
            late = await p.exchange(binding("late"), answer(201))
            assert late.error is not None and late.response is None, "never forwarded"
            assert p.binds == {"succeeded": 0, "throttled": 0, "failed": 2}
            assert outage.counts["requestsDropped"] == 1
            [start] = events(rt, "outage-start")
            assert (start["bindsSucceeded"], start["bindsThrottled"], start["bindsFailed"], start["rule"]) == (
                0, 0, 0, "down")

    asyncio.run(main())


def test_a_request_already_answered_by_another_addon_is_left_alone(tmp_path: Path) -> None:
    async def test(p: Proxy) -> None:
        f = binding()
        f.response = answer(418)
        await flow_hooks([p.faults.addon], f, "request", "response")
        assert f.response.status_code == 418 and p.runtime.counters.requests == 0
        assert p.binds == {"succeeded": 0, "throttled": 0, "failed": 0}

    run(tmp_path, {"abort": {"status": 500}}, test)


def test_every_request_is_reported_to_the_timeouts_open_then_ended_once(tmp_path: Path) -> None:
    async def test(p: Proxy) -> None:
        client = tflow.tclient_conn()
        p.timeouts.client_connected(client)
        first, second = binding("a", client=client), flow("GET", "/api/v1/pods", client=client)
        await flow_hooks(p.chain, first, "requestheaders", "requestheaders")
        await flow_hooks(p.chain, second, "requestheaders")
        assert p.timeouts.conns[client.id].open == 2
        await p.exchange(first, answer(201))
        await flow_hooks(p.chain, first, "error")
        assert p.timeouts.conns[client.id].open == 1, "each request ends once"
        second.error = tflow.terr()
        await flow_hooks(p.chain, second, "error")
        assert p.timeouts.conns[client.id].open == 0 and p.timeouts.conns[client.id].requests == 2

    run(tmp_path, None, test)


def test_the_binding_body_is_read_for_its_target_node(tmp_path: Path) -> None:
    rules = {"abort": {"status": 500}}

    async def test(p: Proxy) -> None:
        for node in ("n1", "n2"):
            await p.exchange(binding(f"pod-{node}", node=node), answer(201))
        assert [r["request"]["name"] for r in events(p.runtime, "inject")] == ["pod-n2"]

    run(tmp_path, rules, test, match={**BIND_MATCH, "targetNodes": ["n2"]})


POD_CREATE = {"verbs": ["create"], "resources": ["pods"]}
OWNER = {"kind": "ReplicaSet", "name": "web", "uid": "rs-uid"}


def _proto(*fields: tuple[int, bytes | int]) -> bytes:
    """A protobuf message of length-delimited (bytes) and varint (int) fields, as Go's encoder writes them."""
    out = b""
    for number, value in fields:
        if isinstance(value, int):
            out += bytes([number << 3 | 0, value])
        else:
            out += bytes([number << 3 | 2, len(value)]) + value
    return out


def _proto_pod(name: str) -> bytes:
    """The apiserver's protobuf answer to a pod create: `k8s\\0`, runtime.Unknown{typeMeta, raw: Pod{metadata}}."""
    owners = [_proto((1, b"ReplicaSet"), (3, b"other"), (4, b"x-uid")),  # not the controller: passed over
              _proto((1, b"ReplicaSet"), (3, b"web"), (4, b"rs-uid"), (5, b"apps/v1"), (6, 1))]
    meta = _proto((1, name.encode()), (2, b"web-"), (3, b"w"), (5, b"pod-uid"), (6, b"812"),
                  *((13, o) for o in owners))
    return b"k8s\x00" + _proto((1, _proto((1, b"v1"), (2, b"Pod"))), (2, _proto((1, meta))))


@pytest.mark.parametrize(("content_type", "body"), [
    (b"application/json", json.dumps({"kind": "Pod", "metadata": {
        "name": "web-x7", "namespace": "w", "uid": "pod-uid", "resourceVersion": "812",
        "ownerReferences": [{"kind": "ReplicaSet", "name": "other", "uid": "x-uid"},
                            {**OWNER, "controller": True}]}}).encode()),
    (b"application/vnd.kubernetes.protobuf", _proto_pod("web-x7")),
], ids=["json", "protobuf"])
def test_a_create_committed_unanswered_journals_the_object_it_wrote(tmp_path: Path, content_type: bytes,
                                                                    body: bytes) -> None:
    """A generated pod's request has no name: the journal names it, and its controller, from the apiserver's
    answer (what the ledger counts a lost answer by)."""
    async def test(p: Proxy) -> None:
        f = await p.exchange(flow("POST", "/api/v1/namespaces/w/pods", b"{}", [JSON]),
                             answer(201, body, [(b"content-type", content_type)]))
        assert f.response is not None and f.response.status_code == 503
        [inject] = events(p.runtime, "inject")
        assert inject["request"]["name"] == "" and inject["upstreamStatus"] == 201
        assert inject["written"] == {"name": "web-x7", "namespace": "w", "uid": "pod-uid", "resourceVersion": "812",
                                     "owner": OWNER}

    run(tmp_path, {"commitThenFail": {"abort": {"status": 503}}}, test, POD_CREATE)


def test_a_create_that_did_not_commit_journals_no_object(tmp_path: Path) -> None:
    async def test(p: Proxy) -> None:
        await p.exchange(flow("POST", "/api/v1/namespaces/w/pods", b"{}", [JSON]),
                         answer(409, json.dumps({"kind": "Status", "code": 409}).encode()))
        [skipped] = events(p.runtime, "commit-skipped")
        assert "written" not in skipped and events(p.runtime, "inject") == []

    run(tmp_path, {"commitThenFail": {"abort": {"status": 503}}}, test, POD_CREATE)
