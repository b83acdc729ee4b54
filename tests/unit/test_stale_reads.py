"""The stale views' addons (proxy.mitm.stale_reads) and what they send (proxy.stale_rewrites): LISTs, GETs and
WatchLists sent to the apiserver at a past revision the proxy saw pass, driven through the chain around the fault
addon with mitmproxy's test flows, no network."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest
from kube_fault_proxy.proxy.mitm.http_parts import header_values
from kube_fault_proxy.proxy.mitm.stale_reads import answer_of
from kube_fault_proxy.proxy.requests.identity import parse
from kube_fault_proxy.proxy.requests.watch import TICK
from kube_fault_proxy.proxy.runtime import Runtime
from kube_fault_proxy.proxy.stale_rewrites import (
    get_as_list,
    initial_events,
    page_query,
    single_object,
    stale_query,
    stale_watch_query,
)
from mitmproxy import http
from mitmproxy.addons import proxyserver
from mitmproxy.test import taddons

from tests.support.builders import profile
from tests.support.mitm import JSON, Clock, Faults, answer, events, exchange, flow, runtime

LIST_OR_GET = {"verbs": ["list", "get"], "resources": ["pods"]}


def test_the_query_asks_for_exactly_that_revision_and_keeps_the_clients_selectors() -> None:
    pairs = [("labelSelector", "app=x"), ("limit", "500"), ("resourceVersion", "0"),
             ("resourceVersionMatch", "NotOlderThan")]
    assert stale_query(pairs, 77) == [("labelSelector", "app=x"), ("limit", "500"), ("resourceVersion", "77"),
                                      ("resourceVersionMatch", "Exact")]
    path, _, query = get_as_list("/api/v1/namespaces/ns/pods/a", "a", 77).partition("?")
    assert path == "/api/v1/namespaces/ns/pods"
    assert parse_qsl(query) == [("fieldSelector", "metadata.name=a"), ("resourceVersion", "77"),
                                ("resourceVersionMatch", "Exact")]
    assert get_as_list("/api/v1/nodes/n1", "n1", 5).startswith("/api/v1/nodes?")


def pod_list(rv: int, *pods: tuple[str, int]) -> bytes:
    items = [{"metadata": {"name": n, "namespace": "ns", "resourceVersion": str(r)}, "spec": {}} for n, r in pods]
    return json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(rv)},
                       "items": items}, separators=(",", ":")).encode()


def test_a_one_object_list_reads_back_as_the_get_of_it_or_404() -> None:
    ident = parse("GET", "/api/v1/namespaces/ns/pods/a")
    reply = single_object(ident, pod_list(50, ("a", 40)))
    assert reply is not None and reply.status == 200
    assert json.loads(reply.body) == {"kind": "Pod", "apiVersion": "v1",
                                      "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "40"}, "spec": {}}
    missing = single_object(ident, pod_list(50))
    assert missing is not None and missing.status == 404
    assert json.loads(missing.body)["message"] == 'pods "a" not found'
    assert single_object(ident, b"not json") is None


def run(tmp_path: Path, fault: dict[str, Any], test: Callable[[Runtime, Faults, Clock], Awaitable[None]],
        match: dict[str, Any] = LIST_OR_GET) -> None:
    clock = Clock(1000.0)
    rt = runtime(tmp_path, profile({"name": "stale", "match": match, "fault": {"staleList": fault}}, name="p",
                                   seed=1), clock=clock)
    rt.activations.activate("p")

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            await test(rt, Faults.of(rt), clock)

    asyncio.run(main())


async def listed(faults: Faults, rv: int, path: str = "/api/v1/nodes") -> http.HTTPFlow:
    """A LIST the rule does not match (nodes), answered at revision rv: the proxy sees rv pass."""
    f = flow("GET", path)
    await exchange(faults.chain, f, answer(200, pod_list(rv)))
    return f


def sent_query(f: http.HTTPFlow) -> dict[str, str]:
    return dict(f.request.query.items(multi=True))


def test_a_list_is_sent_at_the_revision_seen_lag_seconds_ago(tmp_path: Path) -> None:
    async def test(rt: Runtime, faults: Faults, clock: Clock) -> None:
        first = flow("GET", "/api/v1/namespaces/ns/pods?limit=500&resourceVersion=0")
        await exchange(faults.chain, first, answer(200, pod_list(100)))
        assert sent_query(first) == {"limit": "500", "resourceVersion": "0"}, "nothing seen 5s ago: unchanged"
        [skipped] = events(rt, "stale-skipped")
        assert skipped["reason"] == "no revision of pods seen yet"
        # The unmatched answer was noted: LIST of pods at 100 (unchanged, so the apiserver's own revision).
        clock.now += 3
        created = flow("POST", "/api/v1/namespaces/ns/pods", b"{}", [JSON])
        await exchange(faults.chain, created, answer(201, json.dumps(
            {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "b", "resourceVersion": "104"}}, separators=(",", ":")).encode()))
        clock.now += 3
        stale = flow("GET", "/api/v1/namespaces/ns/pods?limit=500&resourceVersion=0")
        await exchange(faults.chain, stale, answer(200, pod_list(100)))
        assert sent_query(stale) == {"limit": "500", "resourceVersion": "100", "resourceVersionMatch": "Exact"}
        [record] = [r for r in events(rt, "inject") if r["fault"] == "staleList"]
        assert {k: record[k] for k in ("servedResourceVersion", "seenSecondsAgo", "writesSince",
                                       "newestResourceVersion", "asked")} == {
            "servedResourceVersion": "100", "seenSecondsAgo": 6.0, "writesSince": 1, "newestResourceVersion": "104",
            "asked": {"lagSeconds": 5.0}}
        assert record["action"] == "serve from the revision seen 5s ago, then forward"
        assert faults.views.log.newest(("", "pods")) == 104, "the stale answer's own (old) revision is not noted"

    run(tmp_path, {"lagSeconds": 5}, test, match={"verbs": ["list"], "resources": ["pods"]})


def test_a_get_is_read_through_a_list_of_that_object_at_the_revision_writes_ago(tmp_path: Path) -> None:
    async def test(rt: Runtime, faults: Faults, clock: Clock) -> None:
        w = flow("GET", "/api/v1/namespaces/ns/pods?watch=1")
        await exchange(faults.chain, w, answer(200, b"", [(b"content-type", b"application/json;stream=watch")]))
        assert w.response is not None and callable(w.response.stream)
        events_in = b"".join(json.dumps({"type": "MODIFIED", "object": {
            "kind": "Pod", "metadata": {"name": "a", "resourceVersion": str(rv)}}}, separators=(",", ":")).encode() + b"\n"
            for rv in (200, 201, 202))
        assert w.response.stream(events_in) == [events_in], "the stream passes unchanged while it is read"
        get = flow("GET", "/api/v1/namespaces/ns/pods/a", headers=[(b"accept", b"application/vnd.kubernetes.protobuf")])
        await exchange(faults.chain, get, answer(200, pod_list(201, ("a", 201))))
        assert get.request.path.startswith("/api/v1/namespaces/ns/pods?")
        assert sent_query(get) == {"fieldSelector": "metadata.name=a", "resourceVersion": "201",
                                   "resourceVersionMatch": "Exact"}
        assert get.request.headers["accept"] == "application/json"
        assert get.response is not None and get.response.status_code == 200
        assert json.loads(get.response.content or b"")["kind"] == "Pod"
        assert json.loads(get.response.content or b"")["metadata"]["resourceVersion"] == "201"
        gone = flow("GET", "/api/v1/namespaces/ns/pods/a")
        await exchange(faults.chain, gone, answer(200, pod_list(201)))
        assert gone.response is not None and gone.response.status_code == 404
        assert [r["servedResourceVersion"] for r in events(rt, "stale-not-found")] == ["201"]
        served = [r for r in events(rt, "inject") if r["fault"] == "staleList"]
        assert [(r["servedAs"], r["writesSince"], r["asked"]) for r in served] == [("list", 1, {"lagWrites": 1})] * 2

    run(tmp_path, {"lagWrites": 1}, test)


def test_a_compacted_revision_answers_410_as_the_apiserver_wrote_it_and_is_journaled(tmp_path: Path) -> None:
    async def test(rt: Runtime, faults: Faults, clock: Clock) -> None:
        await listed(faults, 10, "/api/v1/pods")  # a pods list the rule does match: stale-skipped, then noted
        clock.now += 2
        expired = json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                              "message": "The resourceVersion for the provided list is too old.",
                              "reason": "Expired", "code": 410}).encode()
        f = flow("GET", "/api/v1/pods")
        await exchange(faults.chain, f, answer(410, expired))
        assert f.response is not None and f.response.status_code == 410 and f.response.content == expired
        [record] = events(rt, "stale-compacted")
        assert (record["servedResourceVersion"], record["status"], record["rule"]) == ("10", 410, "stale")

    run(tmp_path, {"lagSeconds": 1}, test, match={"verbs": ["list"], "resources": ["pods"]})


def test_a_watch_edited_by_another_fault_is_read_as_the_apiserver_sent_it(tmp_path: Path) -> None:
    clock = Clock(1000.0)
    rt = runtime(tmp_path, profile({"name": "drop", "match": {"verbs": ["watch"]},
                                    "fault": {"dropEvents": {"events": {"types": ["MODIFIED"]}}}}, name="p"),
                 clock=clock)
    rt.activations.activate("p")

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            faults = Faults.of(rt)
            w = flow("GET", "/api/v1/pods?watch=1")
            await exchange(faults.chain, w, answer(200, b"", [JSON]))
            assert w.response is not None and callable(w.response.stream)
            line = json.dumps({"type": "MODIFIED", "object": {"metadata": {"resourceVersion": "7"}}}, separators=(",", ":")).encode() + b"\n"
            assert w.response.stream(line) == []
            assert faults.views.log.newest(("", "pods")) == 7

    asyncio.run(main())


WATCH_PODS = {"verbs": ["watch"], "resources": ["pods"]}
WATCH_LIST = ("/api/v1/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
              "&resourceVersion=&labelSelector=app%3Dx&timeoutSeconds=300")
STREAM = [(b"content-type", b"application/json;stream=watch")]


async def seen_writes(faults: Faults, *revisions: int) -> None:
    """A plain pods watch (not a WatchList: the rule leaves it) whose events the proxy notes as writes."""
    w = flow("GET", "/api/v1/pods?watch=1")
    await exchange(faults.chain, w, answer(200, b"", STREAM))
    assert w.response is not None and callable(w.response.stream)
    w.response.stream(b"".join(json.dumps({"type": "MODIFIED", "object": {"kind": "Pod", "metadata": {
        "name": "a", "resourceVersion": str(rv)}}}, separators=(",", ":")).encode() + b"\n" for rv in revisions))


def test_a_watch_list_gets_the_paged_list_at_the_revision_then_the_bookmark_then_the_watch_from_it(
        tmp_path: Path) -> None:
    asked: list[dict[str, str]] = []

    def apiserver(request: httpx.Request) -> httpx.Response:
        query = dict(request.url.params)
        asked.append({"path": request.url.path, "accept": request.headers["accept"], **query})
        items = [{"metadata": {"name": "a", "resourceVersion": "150"}, "spec": {"nodeName": "n1"}}] \
            if "continue" not in query else [{"metadata": {"name": "b", "resourceVersion": "180"}}]
        meta = {"resourceVersion": "201", **({"continue": "page-2"} if "continue" not in query else {})}
        return httpx.Response(200, json={"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items})

    async def test(rt: Runtime, faults: Faults, clock: Clock) -> None:
        faults.reads._client = httpx.AsyncClient(base_url="https://apiserver", transport=httpx.MockTransport(apiserver))
        await seen_writes(faults, 200, 201, 202)
        wl = flow("GET", WATCH_LIST, headers=[(b"accept", b"application/vnd.kubernetes.protobuf;stream=watch")])
        await exchange(faults.chain, wl, answer(200, b"", STREAM))
        assert sent_query(wl) == {"watch": "1", "allowWatchBookmarks": "true", "labelSelector": "app=x",
                                  "timeoutSeconds": "300", "resourceVersion": "201"}
        assert wl.request.headers["accept"] == "application/json"
        assert asked == [
            {"path": "/api/v1/pods", "accept": "application/json", "labelSelector": "app=x", "limit": "500",
             "resourceVersion": "201", "resourceVersionMatch": "Exact"},
            {"path": "/api/v1/pods", "accept": "application/json", "labelSelector": "app=x", "limit": "500",
             "continue": "page-2"}]
        assert wl.response is not None and callable(wl.response.stream)
        initial = [json.loads(x) for x in b"".join(wl.response.stream(TICK)).splitlines()]
        assert [(e["type"], e["object"]["metadata"].get("name")) for e in initial] == [
            ("ADDED", "a"), ("ADDED", "b"), ("BOOKMARK", None)]
        assert initial[0]["object"] == {"kind": "Pod", "apiVersion": "v1", "metadata": {
            "name": "a", "resourceVersion": "150"}, "spec": {"nodeName": "n1"}}
        assert initial[2]["object"]["metadata"] == {"resourceVersion": "201",
                                                    "annotations": {"k8s.io/initial-events-end": "true"}}
        later = b'{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"a","resourceVersion":"202"}}}\n'
        assert list(wl.response.stream(later)) == [later], "then the apiserver's own watch, unchanged"
        [served] = [r for r in events(rt, "inject") if r["fault"] == "staleList"]
        assert (served["servedAs"], served["servedResourceVersion"], served["initialEvents"], served["pages"],
                served["writesSince"]) == ("watchlist", "201", 2, 2, 1)

    run(tmp_path, {"lagWrites": 1}, test, match=WATCH_PODS)


def test_a_watch_list_at_a_compacted_revision_gets_the_apiservers_410(tmp_path: Path) -> None:
    gone = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Expired",
            "code": 410, "message": "The resourceVersion for the provided list is too old."}

    async def test(rt: Runtime, faults: Faults, clock: Clock) -> None:
        faults.reads._client = httpx.AsyncClient(base_url="https://apiserver", transport=httpx.MockTransport(
            lambda request: httpx.Response(410, json=gone)))
        await seen_writes(faults, 200, 201)
        wl = flow("GET", WATCH_LIST)
        await exchange(faults.chain, wl)
        assert wl.response is not None and wl.response.status_code == 410
        assert json.loads(wl.response.content or b"") == gone
        [compacted] = events(rt, "stale-compacted")
        assert (compacted["servedResourceVersion"], compacted["status"]) == ("200", 410)

    run(tmp_path, {"lagWrites": 1}, test, match=WATCH_PODS)


def test_the_watch_list_helpers() -> None:
    pairs = [("watch", "1"), ("sendInitialEvents", "true"), ("resourceVersionMatch", "NotOlderThan"),
             ("resourceVersion", "7"), ("fieldSelector", "spec.nodeName="), ("allowWatchBookmarks", "true")]
    assert stale_watch_query(pairs, 5) == [("watch", "1"), ("fieldSelector", "spec.nodeName="),
                                           ("allowWatchBookmarks", "true"), ("resourceVersion", "5")]
    assert page_query(pairs, 5, None) == [("fieldSelector", "spec.nodeName="), ("limit", "500"),
                                          ("resourceVersion", "5"), ("resourceVersionMatch", "Exact")]
    assert page_query(pairs, 5, "t") == [("fieldSelector", "spec.nodeName="), ("limit", "500"), ("continue", "t")]
    assert initial_events(b'{"kind":"Status"}') is None
    assert initial_events(b"not json") is None


@pytest.mark.parametrize("fields", [
    [], [(b"content-type", b"application/json")], [(b"Content-Type", b"application/json;stream=watch")],
    [(b"content-type", b"a"), (b"CONTENT-TYPE", b"b")], [(b"content-encoding", b"gzip"), (b"content-type", b"x")],
    [(b"Content-Encoding", b""), (b"x-other", b"content-type")], [(b"content-type", b"caf\xc3\xa9 \xff")],
])
def test_an_answer_reads_its_headers_as_mitmproxys_headers_read_them(fields: list[tuple[bytes, bytes]]) -> None:
    response = http.Response.make(200, b"{}", fields)
    got = answer_of(response)
    assert (got.content_type, got.encoding) == (response.headers.get("content-type", ""),
                                                response.headers.get("content-encoding", ""))
    assert got.encoded == bool(response.headers.get("content-encoding"))  # an empty Content-Encoding is none
    read = header_values(response.headers, b"content-type", b"x-other", b"accept")
    for name in ("content-type", "x-other", "accept"):  # what a request's user-agent, content-type, accept read
        assert read.get(name.encode(), "") == response.headers.get(name, "")
        assert (name.encode() in read) == (name in response.headers)


def test_a_write_a_fault_answers_with_an_error_is_read_into_the_log_before_the_fault_replaces_it(
        tmp_path: Path) -> None:
    """Why `StaleAnswers` sits before the fault addon: commitThenFail swaps the committed answer for an error in the
    fault addon's `response` hook, and the revision log must count the write the apiserver made all the same."""
    rt = runtime(tmp_path, profile({"name": "ctf", "match": {"verbs": ["create"], "resources": ["pods"]},
                                    "fault": {"commitThenFail": {"abort": {"status": 503}}}}, name="p", seed=1))
    rt.activations.activate("p")

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            faults = Faults.of(rt)
            created = json.dumps({"kind": "Pod", "metadata": {"name": "a", "resourceVersion": "42"}},
                                 separators=(",", ":")).encode()
            f = flow("POST", "/api/v1/namespaces/ns/pods", b"{}", [JSON])
            await exchange(faults.chain, f, answer(201, created))
            assert f.response is not None and f.response.status_code == 503, "the client got the fault's error"
            assert faults.views.log.newest(("", "pods")) == 42
            choice = faults.views.log.choose_writes(("", "pods"), 1, rt.clock())
            assert not isinstance(choice, str) and choice.revision == 41, "the write counts: hiding it serves 41"

    asyncio.run(main())
