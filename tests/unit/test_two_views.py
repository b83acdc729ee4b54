"""twoViews (proxy.faults.two_views): its schema, how client connections are pinned to the two views, and the stale
views' addons serving a lagging view to one connection and the current state to another, driven through the chain
around the fault addon with mitmproxy's test flows, no network."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from kube_fault_proxy.proxy.faults.base import Draw
from kube_fault_proxy.proxy.faults.plan import PinView, ServeStale
from kube_fault_proxy.proxy.faults.stale_list import StaleList
from kube_fault_proxy.proxy.faults.two_views import MAX_CONNECTIONS, Pinned, TwoViews, ViewPins
from kube_fault_proxy.proxy.profiles.problems import ProfileError
from kube_fault_proxy.proxy.requests.identity import parse
from kube_fault_proxy.proxy.requests.watch import TICK
from kube_fault_proxy.proxy.runtime import Runtime
from mitmproxy import connection, http
from mitmproxy.addons import proxyserver
from mitmproxy.test import taddons, tflow, tutils

from tests.support.builders import profile
from tests.support.mitm import JSON, Clock, Faults, answer, events, exchange, runtime

LISTS = {"verbs": ["list"], "resources": ["configmaps"]}
STREAM = [(b"content-type", b"application/json;stream=watch")]
SEED = 2  # the first client gets view 0 (Random("2/r/views")), the current state


def first_view(seed: int, rule: str) -> int:
    """The first client's view, as the reference states it."""
    return random.Random(f"{seed}/{rule}/views").randrange(2)


@pytest.mark.parametrize(("fault", "expected"), [
    ({}, "twoViews needs exactly one of lagSeconds, lagWrites (the lagging view's lag)"),
    ({"lagSeconds": 5, "lagWrites": 2}, "twoViews needs exactly one of lagSeconds, lagWrites"),
    ({"lagSeconds": 0}, "twoViews.lagSeconds: Input should be greater than 0"),
    ({"lagWrites": 1001}, "twoViews.lagWrites: Input should be less than or equal to 1000"),
    ({"lagWrites": 2, "views": 2}, "twoViews.views: unknown field"),
])
def test_the_schema_is_strict_and_names_the_field(fault: dict[str, Any], expected: str) -> None:
    with pytest.raises(ProfileError) as e:
        profile({"name": "r", "fault": {"twoViews": fault}})
    assert expected in str(e.value)


def test_the_plan_carries_the_current_view_and_the_lag_and_applies_where_stale_list_does() -> None:
    spec = TwoViews.model_validate({"lagSeconds": 3})
    [step] = spec.plan(parse("GET", "/api/v1/pods"), random.Random(0)).before
    assert step == PinView((None, ServeStale(3.0, None)), ({}, {"lagSeconds": 3.0}))
    assert step.describe() == "serve the connection's view: the current state or from the revision seen 3s ago"
    assert spec.applies_to(parse("GET", "/api/v1/pods", "watch=1&sendInitialEvents=true"))
    assert not spec.applies_to(parse("GET", "/api/v1/pods", "watch=1"))  # a resumed watch: never a view
    assert not spec.applies_to(parse("POST", "/api/v1/namespaces/ns/pods"))


def test_a_searched_rule_draws_its_lag_as_stale_list_does() -> None:
    for seed in range(20):
        drawn = TwoViews.draw(random.Random(seed), Draw())
        assert drawn == StaleList.draw(random.Random(seed), Draw())
        TwoViews.model_validate(drawn)


def test_clients_start_on_alternate_views_and_each_reconnect_moves_to_the_other() -> None:
    pins = ViewPins()
    s = first_view(SEED, "r")

    def pin(client: str, conn: str) -> tuple[int, bool, int]:
        p = pins.pin("p", 1, SEED, "r", client, conn)
        return p.view, p.new, p.connections

    assert pin("a", "a1") == (s, True, 1)
    assert pin("b", "b1") == (1 - s, True, 1), "the next new client: the other view"
    assert pin("a", "a1") == (s, False, 1), "a connection keeps its view"
    assert pin("c", "c1") == (s, True, 1)
    assert pin("a", "a2") == (1 - s, True, 2), "a reconnect: the other view"
    assert pin("a", "a3") == (s, True, 3)
    assert pin("a", "a2") == (1 - s, False, 3), "an older connection still open keeps its own"
    assert pin("b", "b2") == (s, True, 2)
    # Another rule pins afresh, from its own draw; so does the next activation.
    assert pins.pin("p", 1, SEED, "other", "a", "a1").view == first_view(SEED, "other")
    assert pins.pin("p", 2, SEED, "r", "a", "a9") == Pinned(s, True, 1)
    # The first view depends on the seed only: both occur.
    assert {first_view(seed, "r") for seed in range(20)} == {0, 1}


def test_pins_are_bounded_and_a_forgotten_connection_is_pinned_again() -> None:
    pins = ViewPins()
    first = pins.pin("p", 1, SEED, "r", "a", "c0").view
    for i in range(1, MAX_CONNECTIONS + 1):
        pins.pin("p", 1, SEED, "r", "a", f"c{i}")
    again = pins.pin("p", 1, SEED, "r", "a", "c0")
    assert again.new and again.connections == MAX_CONNECTIONS + 2
    assert again.view == (first + MAX_CONNECTIONS + 1) % 2, "still alternating"


def conn() -> connection.Client:
    return tflow.tclient_conn()


def list_flow(client: connection.Client, agent: str = "kube-scheduler/v1.36") -> http.HTTPFlow:
    req = tutils.treq(method=b"GET", path=b"/api/v1/namespaces/ns/configmaps?limit=500",
                      headers=http.Headers([(b"user-agent", agent.encode())]))
    return tflow.tflow(req=req, client_conn=client)


def cm_list(rv: int) -> bytes:
    return json.dumps({"kind": "ConfigMapList", "apiVersion": "v1", "metadata": {"resourceVersion": str(rv)},
                       "items": []}, separators=(",", ":")).encode()


async def write(faults: Faults, rv: int) -> None:
    """A configmap created through the proxy at revision rv: the revision log counts the write (compact JSON, as
    the apiserver writes it: the log finds the revision by a byte search)."""
    req = tutils.treq(method=b"POST", path=b"/api/v1/namespaces/ns/configmaps", content=b"{}",
                      headers=http.Headers([JSON]))
    body = json.dumps({"kind": "ConfigMap", "metadata": {"name": f"c{rv}", "resourceVersion": str(rv)}}, separators=(",", ":")).encode()
    await exchange(faults.chain, tflow.tflow(req=req), answer(201, body))


def run(tmp_path: Path, fault: dict[str, Any], test: Callable[[Runtime, Faults], Awaitable[None]],
        match: dict[str, Any] = LISTS) -> None:
    rt = runtime(tmp_path, profile({"name": "r", "match": match, "fault": {"twoViews": fault}}, name="p",
                                   seed=SEED), clock=Clock(1000.0))
    rt.activations.activate("p")

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            await test(rt, Faults.of(rt))

    asyncio.run(main())


def test_two_connections_see_two_views_and_a_reconnect_goes_back_in_time(tmp_path: Path) -> None:
    assert first_view(SEED, "r") == 0, "the seed puts the first client on the current view"

    async def test(rt: Runtime, faults: Faults) -> None:
        for rv in (10, 11, 12):
            await write(faults, rv)
        fresh_conn, lagging_conn = conn(), conn()
        fresh = list_flow(fresh_conn, "client-a")
        await exchange(faults.chain, fresh, answer(200, cm_list(12)))
        assert dict(fresh.request.query.items(multi=True)) == {"limit": "500"}, "the current view: unchanged"
        lagging = list_flow(lagging_conn, "client-b")
        await exchange(faults.chain, lagging, answer(200, cm_list(10)))
        assert dict(lagging.request.query.items(multi=True)) == {
            "limit": "500", "resourceVersion": "10", "resourceVersionMatch": "Exact"}, "2 writes hidden"
        again = list_flow(fresh_conn, "client-a")  # the same connection: the same view
        await exchange(faults.chain, again, answer(200, cm_list(12)))
        assert "resourceVersion" not in again.request.query
        moved = list_flow(conn(), "client-a")  # client-a reconnects: the lagging view, older than 12
        await exchange(faults.chain, moved, answer(200, cm_list(10)))
        assert moved.request.query["resourceVersion"] == "10"
        pinned = events(rt, "view-pinned")
        assert [(r["client"], r["view"], r["viewLag"], r["clientConnection"]) for r in pinned] == [
            ("client-a", 0, {}, 1), ("client-b", 1, {"lagWrites": 2}, 1), ("client-a", 1, {"lagWrites": 2}, 2)]
        assert [r["connection"] for r in pinned] == [fresh_conn.id, lagging_conn.id, moved.client_conn.id]
        assert pinned[0]["otherViewLag"] == {"lagWrites": 2} and pinned[0]["rule"] == "r"
        served = [r for r in events(rt, "inject") if r["fault"] == "twoViews"]
        assert [(r["connection"], r["view"], r["servedResourceVersion"], r["writesSince"]) for r in served] == [
            (lagging_conn.id, 1, "10", 2), (moved.client_conn.id, 1, "10", 2)]
        assert served[0]["action"] == "serve from the revision 2 writes back, then forward"

    run(tmp_path, {"lagWrites": 2}, test)


def test_a_lagging_view_with_no_revision_old_enough_passes_and_says_which_view(tmp_path: Path) -> None:
    async def test(rt: Runtime, faults: Faults) -> None:
        for client in (conn(), conn()):  # one connection on each view
            f = list_flow(client)
            await exchange(faults.chain, f, answer(200, cm_list(5)))
            assert "resourceVersion" not in f.request.query
        [skipped] = events(rt, "stale-skipped")
        assert (skipped["view"], skipped["asked"], skipped["reason"]) == (
            1, {"lagWrites": 3}, "0 writes of configmaps seen, 3 needed to hide 3")
        assert skipped["viewLag"] == {"lagWrites": 3}
        assert [r["viewLag"] for r in events(rt, "view-pinned")].count({}) == 1

    run(tmp_path, {"lagWrites": 3}, test)


def test_a_watch_list_on_the_lagging_view_starts_from_the_past_and_on_the_current_view_passes(tmp_path: Path) -> None:
    """A WatchList relist after a reconnect: on view 1 its initial events are the LIST 1 write back, then the watch
    from that revision; on view 0 it goes to the apiserver as sent."""
    watch_list = "/api/v1/namespaces/ns/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"
    asked: list[dict[str, str]] = []

    def apiserver(request: httpx.Request) -> httpx.Response:
        asked.append(dict(request.url.params))
        return httpx.Response(200, json={"kind": "ConfigMapList", "apiVersion": "v1",
                                         "metadata": {"resourceVersion": "11"},
                                         "items": [{"metadata": {"name": "c10", "resourceVersion": "10"}}]})

    async def test(rt: Runtime, faults: Faults) -> None:
        faults.reads._client = httpx.AsyncClient(base_url="https://apiserver", transport=httpx.MockTransport(apiserver))
        for rv in (10, 11, 12):
            await write(faults, rv)
        sent = []
        for client in (conn(), conn()):  # view 0, then view 1
            req = tutils.treq(method=b"GET", path=watch_list.encode(), headers=http.Headers([(b"user-agent", b"c")]))
            f = tflow.tflow(req=req, client_conn=client)
            await exchange(faults.chain, f, answer(200, b"", STREAM))
            sent.append(dict(f.request.query.items(multi=True)))
            if len(sent) == 2:
                assert f.response is not None and callable(f.response.stream)
                initial = [json.loads(x) for x in b"".join(f.response.stream(TICK)).splitlines()]
                assert [(e["type"], e["object"]["metadata"]["resourceVersion"]) for e in initial] == [
                    ("ADDED", "10"), ("BOOKMARK", "11")]
        assert sent[0] == {"watch": "1", "sendInitialEvents": "true", "resourceVersionMatch": "NotOlderThan"}
        assert sent[1] == {"watch": "1", "resourceVersion": "11"}, "the watch from the past revision"
        assert asked == [{"limit": "500", "resourceVersion": "11", "resourceVersionMatch": "Exact"}]
        [served] = [r for r in events(rt, "inject") if r["fault"] == "twoViews"]
        assert (served["servedAs"], served["view"], served["servedResourceVersion"]) == ("watchlist", 1, "11")

    run(tmp_path, {"lagWrites": 1}, test, match={"verbs": ["watch"], "resources": ["configmaps"]})
