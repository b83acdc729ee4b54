"""Watch and connection faults on the wire, against the TLS + HTTP/2 stand-in (real clients)."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import ssl
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.control import activate, injections
from tests.support.processes import Started, start_fake_apiserver, start_proxy
from tests.support.raw_h2 import RawH2

PODS = {"verbs": ["watch"], "resources": ["pods"]}


def watch_lines(client: httpx.Client, **params: str) -> list[dict[str, object]]:
    with client.stream("GET", "/api/v1/pods", params={"watch": "1", "interval": "0.05", **params}) as s:
        return [json.loads(line) for line in s.iter_lines() if line]


def names(events: list[dict[str, object]]) -> list[str]:
    return [f"{e['type']} {e['object']['metadata'].get('name', '')}" for e in events]  # type: ignore[index]


async def post_binding(c: httpx.AsyncClient, name: str, **params: str) -> str:
    """One Binding POST through the proxy: `HTTP <status>`, or the error's type name."""
    try:
        r = await c.post(f"/api/v1/namespaces/default/pods/{name}/binding", params=params,
                         json={"kind": "Binding", "apiVersion": "v1", "metadata": {"name": name},
                               "target": {"kind": "Node", "name": "n1"}})
        return f"HTTP {r.status_code}"
    except Exception as e:  # httpcore lets anyio.EndOfStream out of a connection closed mid-write
        return type(e).__name__


def upstream_bindings(pki: Path, up: Started) -> dict[str, Any]:
    """What the stand-in saw of Bindings (bound, posts, cancelled), asked directly."""
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    ctx.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
    seen: dict[str, Any] = httpx.get(f"https://127.0.0.1:{up.ready['port']}/debug/bindings", verify=ctx).json()
    return seen


def test_expire_sends_the_410_error_event_and_never_reaches_upstream(h2: httpx.Client, control: httpx.Client) -> None:
    activate(control, "exp", [{"name": "e", "match": PODS, "fault": {"expire": {}}}])
    r = h2.get("/api/v1/pods", params={"watch": "1", "resourceVersion": "42"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.json() == {"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "too old resource version: 42 (43)", "reason": "Expired", "code": 410}}
    [record] = injections(control)
    assert record["fault"] == "expire" and record["request"]["resourceVersion"] == "42"


def test_cut_after_events_with_an_error(h2: httpx.Client, control: httpx.Client) -> None:
    activate(control, "cut", [{"name": "c", "match": PODS, "fault": {"cut": {"afterEvents": 2, "error": "internal"}}}])
    events = watch_lines(h2, n="6")
    assert names(events)[:2] == ["ADDED p0", "ADDED p1"]
    assert events[2]["type"] == "ERROR" and events[2]["object"]["code"] == 500  # type: ignore[index]
    assert len(events) == 3
    since = int(control.headers["x-test-journal-cursor"])
    records = control.get("/v1/journal", params={"since": since}).json()["records"]
    assert [r["action"] for r in records if r["event"] == "watch-event"] == ["cut"]


def test_cut_after_events_without_an_error_cuts_the_connection(h2: httpx.Client, control: httpx.Client) -> None:
    activate(control, "cut", [{"name": "c", "match": PODS, "fault": {"cut": {"afterEvents": 2}}}])
    got: list[str] = []
    with pytest.raises(httpx.HTTPError), h2.stream(
        "GET", "/api/v1/pods", params={"watch": "1", "n": "8", "interval": "0.2"}
    ) as s:
        got.extend(s.iter_lines())
    assert len([line for line in got if line]) == 2
    statuses = []
    for _ in range(3):  # the cut connection may still be in the pool once; then a new one is made
        try:
            statuses.append(h2.get("/healthz").status_code)
            break
        except httpx.HTTPError as e:
            statuses.append(type(e).__name__)
    assert statuses[-1] == 200, statuses


def test_cut_after_seconds_lowers_the_apiservers_own_timeout(h2: httpx.Client, control: httpx.Client) -> None:
    activate(control, "cut", [{"name": "c", "match": PODS, "fault": {"cut": {"afterSeconds": 1}}}])
    t = time.monotonic()
    with h2.stream("GET", "/api/v1/pods", params={"watch": "1", "n": "100", "interval": "0.1",
                                                  "timeoutSeconds": "300"}) as s:
        assert s.headers["x-timeout-seconds"] == "1"
        count = sum(1 for line in s.iter_lines() if line)
    assert 0.9 < time.monotonic() - t < 3 and 5 < count < 20


def test_drop_and_duplicate_chosen_events(h2: httpx.Client, control: httpx.Client) -> None:
    activate(control, "drop", [{"name": "d", "match": PODS,
                                "fault": {"dropEvents": {"events": {"names": ["p1", "p3"]}}}}])
    assert names(watch_lines(h2, n="5")) == ["ADDED p0", "ADDED p2", "ADDED p4"]
    activate(control, "dup", [{"name": "d", "match": PODS,
                               "fault": {"duplicateEvents": {"events": {"names": ["p2"]}}}}])
    assert names(watch_lines(h2, n="4")) == ["ADDED p0", "ADDED p1", "ADDED p2", "ADDED p2", "ADDED p3"]
    since = int(control.headers["x-test-journal-cursor"])
    records = control.get("/v1/journal", params={"since": since}).json()["records"]
    assert [(r["action"], r["name"]) for r in records if r["event"] == "watch-event"] == [
        ("dropped", "p1"), ("dropped", "p3"), ("duplicated", "p2")]


def test_a_watch_the_proxy_cannot_parse_passes_untouched_and_is_noted(h2: httpx.Client, control: httpx.Client) -> None:
    activate(control, "drop", [{"name": "d", "match": PODS, "fault": {"dropEvents": {}}}])
    events = watch_lines(h2, n="3", ctype="application/vnd.kubernetes.protobuf;stream=watch")
    assert len(events) == 3
    since = int(control.headers["x-test-journal-cursor"])
    records = control.get("/v1/journal", params={"since": since}).json()["records"]
    [note] = [r for r in records if r["event"] == "watch-unparsable"]
    assert note["contentType"] == "application/vnd.kubernetes.protobuf;stream=watch"


def test_a_compressed_watch_list_passes_as_it_came_and_its_event_revisions_are_read(h2: httpx.Client,
                                                                                  control: httpx.Client) -> None:
    """kube-apiserver 1.37 gzips a WatchList's stream, a gzip member per flush, for a client that accepts gzip (Go's
    transport asks by itself): with no rule on it the stream passes as it came, and the revision log reads its
    events from a decoded copy, so a staleList can hide the writes it showed."""
    activate(control, "stale", [{"name": "s", "match": {"verbs": ["list"], "resources": ["pods"]},
                                 "fault": {"staleList": {"lagWrites": 2}}}])
    params = {"watch": "1", "interval": "0.05", "n": "4", "sendInitialEvents": "true", "firstRevision": "900"}
    with h2.stream("GET", "/api/v1/pods", params=params, headers={"accept-encoding": "gzip"}) as s:
        assert s.headers["content-encoding"] == "gzip"
        raw = b"".join(s.iter_raw())
    assert raw.count(b"\x1f\x8b\x08") == 4, "a member per event, as the stand-in sent them"
    events = [json.loads(line) for line in gzip.decompress(raw).splitlines()]
    assert names(events) == ["ADDED p0", "ADDED p1", "ADDED p2", "ADDED p3"]  # revisions 900 to 903
    listed = h2.get("/api/v1/pods")
    assert listed.headers["x-query"] == "resourceVersion=901&resourceVersionMatch=Exact", "p2 and p3 hidden"
    [served] = injections(control)
    assert (served["servedResourceVersion"], served["writesSince"], served["newestResourceVersion"]) == ("901", 2, "903")


def test_an_edited_watch_list_is_asked_for_uncompressed_and_edited(h2: httpx.Client, control: httpx.Client) -> None:
    """A watch fault that edits events asks for the stream without the client's Accept-Encoding (journaled
    `watch-uncompressed`): the apiserver sends it plain and the events are edited, not passed on unread."""
    activate(control, "drop", [{"name": "d", "match": PODS, "fault": {"dropEvents": {"events": {"names": ["p1"]}}}}])
    params = {"watch": "1", "interval": "0.05", "n": "3", "sendInitialEvents": "true"}
    with h2.stream("GET", "/api/v1/pods", params=params, headers={"accept-encoding": "gzip, deflate"}) as s:
        assert "content-encoding" not in s.headers
        events = [json.loads(line) for line in s.iter_lines() if line]
    assert names(events) == ["ADDED p0", "ADDED p2"]
    records = control.get("/v1/journal", params={"since": control.headers["x-test-journal-cursor"]}).json()["records"]
    [asked] = [r for r in records if r["event"] == "watch-uncompressed"]
    assert asked["acceptEncoding"] == "gzip, deflate" and asked["rule"] == "d"
    assert not [r for r in records if r["event"] == "watch-unparsable"]


def test_reset_upstream_fails_every_stream_of_the_client(proxy: Started, control: httpx.Client) -> None:
    activate(control, "ru", [{"name": "r", "match": {"verbs": ["create"]}, "when": {"maxInjections": 1},
                              "fault": {"resetUpstream": {}}}])

    async def run() -> tuple[BaseException | None, BaseException | None, int]:
        async with httpx.AsyncClient(http2=True, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"],
                                     timeout=10) as c:
            watch_error: BaseException | None = None

            async def watch() -> None:
                nonlocal watch_error
                try:
                    async with c.stream("GET", "/api/v1/pods", params={"watch": "1", "n": "50",
                                                                       "interval": "0.1"}) as s:
                        async for _ in s.aiter_lines():
                            pass
                except httpx.HTTPError as e:
                    watch_error = e

            task = asyncio.create_task(watch())
            await asyncio.sleep(0.5)
            post_error: BaseException | None = None
            try:
                await c.post("/api/v1/namespaces/default/pods/x/binding", json={})
            except httpx.HTTPError as e:
                post_error = e
            await asyncio.wait_for(task, 10)
            for _ in range(3):  # the dropped connection may still be pooled once
                try:
                    return watch_error, post_error, (await c.get("/healthz")).status_code
                except httpx.HTTPError:
                    continue
            return watch_error, post_error, 0

    watch_error, post_error, after = asyncio.run(run())
    assert watch_error is not None and post_error is not None
    assert after == 200


@pytest.mark.parametrize("refuse", ["close", "refuse", "blackhole"])
def test_outage_then_recovery(refuse: str, pki: Path, tmp_path: Path) -> None:
    up = start_fake_apiserver(pki, tmp_path / "up")
    proxy = start_proxy(f"https://127.0.0.1:{up.ready['port']}", pki, tmp_path / "proxy")
    try:
        with httpx.Client(base_url=proxy.ready["controlUrl"]) as control:
            control.headers["x-test-journal-cursor"] = "0"
            activate(control, "out", [{"name": "o", "match": {"paths": ["/outage-now"]}, "when": {"maxInjections": 1},
                                       "fault": {"outage": {"seconds": 2, "refuse": refuse}}}])
            with httpx.Client(http2=True, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"],
                              timeout=1.0) as c:
                assert c.get("/healthz").status_code == 200
                t = time.monotonic()
                with pytest.raises(httpx.HTTPError):
                    c.get("/outage-now")
                during = []
                while time.monotonic() - t < 1.5:
                    try:
                        during.append(c.get("/healthz").status_code)
                    except httpx.HTTPError as e:
                        during.append(type(e).__name__)
                    time.sleep(0.1)
                assert 200 not in during, during
                time.sleep(max(0.0, 2.3 - (time.monotonic() - t)))
                after = []
                for _ in range(20):
                    try:
                        after.append(c.get("/healthz").status_code)
                        break
                    except httpx.HTTPError as e:
                        after.append(type(e).__name__)
                        time.sleep(0.2)
                assert after[-1] == 200, after
            with httpx.Client(http2=True, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"]) as fresh:
                assert fresh.get("/healthz").status_code == 200  # new connections are served again
            records = control.get("/v1/journal", params={"since": 0}).json()["records"]
            start = next(r for r in records if r["event"] == "outage-start")
            end = next(r for r in records if r["event"] == "outage-end")
            assert start["refuse"] == refuse and start["rule"] == "o"
            if refuse == "refuse":  # the listener itself is closed: the OS refuses, nothing to count
                assert "ConnectError" in during and end["listener"] == "stopped"
            else:
                assert end["newConnectionsRefused"] >= 1
            assert end["time"] - start["time"] == pytest.approx(2.0, abs=0.5)
    finally:
        assert proxy.stop() == 0
        up.stop()


def test_outage_fails_every_in_flight_request_at_once(pki: Path, tmp_path: Path) -> None:
    """kill -9 semantics: requests in flight on many connections all fail at the outage, not when
    the clients' health checks give up later."""
    up = start_fake_apiserver(pki, tmp_path / "up")
    proxy = start_proxy(f"https://127.0.0.1:{up.ready['port']}", pki, tmp_path / "proxy")
    conns, per_conn = 40, 5

    async def drive() -> list[tuple[str, float]]:
        clients = [httpx.AsyncClient(http2=True, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"],
                                     timeout=20.0) for _ in range(conns + 1)]
        try:
            await asyncio.gather(*(c.get("/healthz") for c in clients))  # one connection each

            async def slow(c: httpx.AsyncClient) -> tuple[str, float]:
                try:
                    r = await c.get("/slow", params={"seconds": "15"})
                    return f"HTTP {r.status_code}", time.monotonic()
                except httpx.HTTPError as e:
                    return type(e).__name__, time.monotonic()

            in_flight = [asyncio.create_task(slow(c)) for c in clients[:conns] for _ in range(per_conn)]
            await asyncio.sleep(1.0)
            with pytest.raises(httpx.HTTPError):  # on a busy connection, as the 200th Binding is
                await clients[0].get("/outage-now")
            return [(what, at - t0) for what, at in await asyncio.gather(*in_flight)]
        finally:
            for c in clients:
                with contextlib.suppress(Exception):
                    await c.aclose()

    try:
        with httpx.Client(base_url=proxy.ready["controlUrl"]) as control:
            activate(control, "out", [{"name": "o", "match": {"paths": ["/outage-now"]}, "when": {"maxInjections": 1},
                                       "fault": {"outage": {"seconds": 3, "refuse": "close"}}}])
            t0 = time.monotonic()
            outcomes = asyncio.run(drive())
            assert len(outcomes) == conns * per_conn
            assert not [o for o in outcomes if o[0].startswith("HTTP")], outcomes
            latest = max(at for _, at in outcomes)
            assert latest < 1.0 + 3.0, f"an in-flight request failed only {latest:.1f}s in"
            end = None
            for _ in range(50):  # the outage lasts 3 s
                records = control.get("/v1/journal", params={"since": 0}).json()["records"]
                end = next((r for r in records if r["event"] == "outage-end"), None)
                if end:
                    break
                time.sleep(0.1)
            assert end is not None
            assert end["clientConnectionsLingering"] == 0
            assert end["clientConnectionsClosed"] >= conns + 1
    finally:
        assert proxy.stop() == 0
        up.stop()


def test_nothing_read_after_the_outage_began_reaches_the_upstream(pki: Path, tmp_path: Path) -> None:
    """A burst arrives in few reads: the Bindings behind the one that starts the outage are already
    inside the proxy. A killed apiserver would never see them; neither may the upstream here. The
    burst leaves the client in one write, so that the proxy reads it whole however loaded the machine
    is (an HTTP client writing each request as it is ready let a busy proxy read them one by one)."""
    up = start_fake_apiserver(pki, tmp_path / "up")
    proxy = start_proxy(f"https://127.0.0.1:{up.ready['port']}", pki, tmp_path / "proxy")
    bind_match = {"verbs": ["create"], "resources": ["pods"], "subresources": ["binding"]}

    def burst(n: int) -> list[str]:
        c = RawH2(proxy.ready["proxyUrl"], proxy.ready["caFile"])
        try:
            hello = c.get("/healthz")
            deadline = time.monotonic() + 10
            while c.ended_at(hello) is None and c.closed_at is None and time.monotonic() < deadline:
                c.pump(0.2)  # its answer, and the proxy's SETTINGS with it
            assert c.status(hello) == 200
            sids = [c.post(f"/api/v1/namespaces/default/pods/burst-{i:04d}/binding", json.dumps(
                {"kind": "Binding", "apiVersion": "v1", "metadata": {"name": f"burst-{i:04d}"},
                 "target": {"kind": "Node", "name": "n1"}}).encode(), flush=False) for i in range(n)]
            c.send()
            c.pump(10.0)  # until the outage closes the connection
            assert c.closed_at is not None, "the outage left the connection open"
            return [f"HTTP {c.status(sid)}" if c.status(sid) else "closed" for sid in sids]
        finally:
            c.close()

    try:
        with httpx.Client(base_url=proxy.ready["controlUrl"]) as control:
            activate(control, "out", [{"name": "o", "match": bind_match,
                                       "when": {"trigger": {"match": bind_match, "count": 50}, "maxInjections": 1},
                                       "fault": {"outage": {"seconds": 2, "refuse": "close"}}}])
            outcomes = burst(100)  # within hyper-h2's 100 streams before the proxy's SETTINGS
            posts = upstream_bindings(pki, up)["posts"]
            assert len(posts) <= 49, f"{len(posts)} Bindings reached the upstream; the outage began at the 50th"
            assert outcomes.count("HTTP 201") <= len(posts)
            time.sleep(2.5)
            records = control.get("/v1/journal", params={"since": 0}).json()["records"]
            end = next(r for r in records if r["event"] == "outage-end")
            assert end["requestsDropped"] >= 1, end  # part of the burst was inside the proxy: dropped, not sent
            # Every Binding the proxy read (decided, or dropped by the outage) is counted once, by what
            # its client got: those in flight at the outage as failed. An answer the proxy had passed
            # on but not yet written when the socket was aborted counts as a success it cannot see
            # lost, so the client may have seen fewer. The rest of the burst never left the client.
            stats = control.get("/v1/stats").json()
            binds, decided = stats["bindsTotal"], stats["requestsByResource"]["create pods"]
            assert binds["throttled"] == 0, binds
            assert binds["succeeded"] + binds["failed"] == decided + end["requestsDropped"], (binds, decided, end)
            assert outcomes.count("HTTP 201") <= binds["succeeded"], binds
    finally:
        assert proxy.stop() == 0
        up.stop()


def test_outage_kills_the_requests_already_forwarded_upstream(pki: Path, tmp_path: Path) -> None:
    """kill -9 semantics on the apiserver's side: Bindings the proxy had forwarded but the upstream
    had not yet committed are dropped with the upstream connection (the apiserver cancels a request
    whose connection dies), instead of being committed behind the scheduler's back; the proxy counts
    each as failed, as its client saw it."""
    up = start_fake_apiserver(pki, tmp_path / "up")
    proxy = start_proxy(f"https://127.0.0.1:{up.ready['port']}", pki, tmp_path / "proxy")
    slow = 20

    async def drive() -> list[str]:
        async with httpx.AsyncClient(http2=True, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"],
                                     timeout=20.0, limits=httpx.Limits(max_connections=1)) as c:
            await c.get("/healthz")

            in_flight = [asyncio.create_task(post_binding(c, f"slow-{i:02d}", delay="3")) for i in range(slow)]
            await asyncio.sleep(1.0)  # all forwarded: the upstream holds them for 3 s
            with pytest.raises(httpx.HTTPError):
                await c.get("/outage-now")
            return await asyncio.gather(*in_flight)

    try:
        with httpx.Client(base_url=proxy.ready["controlUrl"]) as control:
            activate(control, "out", [{"name": "o", "match": {"paths": ["/outage-now"]}, "when": {"maxInjections": 1},
                                       "fault": {"outage": {"seconds": 2, "refuse": "close"}}}])
            outcomes = asyncio.run(drive())
            assert not [o for o in outcomes if o.startswith("HTTP")], outcomes
            time.sleep(3.0)  # past every delay: a Binding still alive upstream would be committed by now
            seen = upstream_bindings(pki, up)
            assert len(seen["posts"]) == slow, seen  # every one had reached the upstream
            assert seen["bound"] == {} and len(seen["cancelled"]) == slow, seen
            stats = control.get("/v1/stats").json()
            assert stats["bindsTotal"] == {"succeeded": 0, "throttled": 0, "failed": slow}, stats["bindsTotal"]
            end = next(r for r in control.get("/v1/journal", params={"since": 0}).json()["records"]
                       if r["event"] == "outage-end")
            assert end["upstreamConnectionsAborted"] >= 1, end
    finally:
        assert proxy.stop() == 0
        up.stop()


def test_stale_list_sends_lists_and_gets_at_a_revision_the_proxy_saw(h2: httpx.Client, control: httpx.Client) -> None:
    assert h2.get("/api/v1/nodes").status_code == 200  # the stand-in's list at revision 99: the proxy notes it
    activate(control, "stale", [{"name": "s", "match": {"verbs": ["list", "get"], "resources": ["nodes"]},
                                 "fault": {"staleList": {"lagSeconds": 0.3}}}])
    time.sleep(0.4)
    listed = h2.get("/api/v1/nodes", params={"limit": "5", "resourceVersion": "0"})
    assert listed.status_code == 200 and listed.json()["metadata"]["resourceVersion"] == "99"
    assert listed.headers["x-query"] == "limit=5&resourceVersion=99&resourceVersionMatch=Exact"
    got = h2.get("/api/v1/nodes/p1", headers={"accept": "application/vnd.kubernetes.protobuf"})
    assert got.status_code == 200 and got.headers["content-type"] == "application/json"
    assert got.json() == {"kind": "Pod", "apiVersion": "v1",
                          "metadata": {"name": "p1", "namespace": "default", "resourceVersion": "91"}}
    missing = h2.get("/api/v1/nodes/p7")
    assert missing.status_code == 404 and missing.json()["reason"] == "NotFound"
    served = injections(control)
    assert [(r["servedResourceVersion"], r.get("servedAs")) for r in served] == [("99", None), ("99", "list"),
                                                                                 ("99", "list")]
    records = control.get("/v1/journal", params={"since": control.headers["x-test-journal-cursor"]}).json()["records"]
    assert [r["event"] for r in records if r["event"].startswith("stale-")] == ["stale-not-found"]


def test_stale_list_passes_the_apiservers_410_for_a_compacted_revision(h2: httpx.Client, control: httpx.Client) -> None:
    activate(control, "stale", [{"name": "s", "match": {"verbs": ["list"], "resources": ["configmaps"]},
                                 "fault": {"staleList": {"lagWrites": 1}}}])
    first = h2.get("/api/v1/configmaps")
    assert first.status_code == 200 and first.headers["x-query"] == "", "no write of configmaps seen yet: unchanged"
    for rv in (40, 41):  # two creates answered: revision 40 is one write back (below 50: compacted, says the stand-in)
        body = json.dumps({"kind": "ConfigMap", "apiVersion": "v1",
                           "metadata": {"name": f"c{rv}", "resourceVersion": str(rv)}}, separators=(",", ":"))
        assert h2.post("/api/v1/namespaces/default/configmaps", content=body,
                       headers={"content-type": "application/json"}).status_code == 201
    gone = h2.get("/api/v1/configmaps")
    assert gone.status_code == 410 and gone.json()["reason"] == "Expired", "the apiserver's own answer, passed on"
    assert gone.headers["x-query"] == "resourceVersion=40&resourceVersionMatch=Exact"
    records = control.get("/v1/journal", params={"since": control.headers["x-test-journal-cursor"]}).json()["records"]
    assert [r["reason"] for r in records if r["event"] == "stale-skipped"] == [
        "0 writes of configmaps seen, 1 needed to hide 1"]
    [compacted] = [r for r in records if r["event"] == "stale-compacted"]
    assert (compacted["servedResourceVersion"], compacted["status"]) == ("40", 410)


def test_stale_list_counts_a_delete_answered_without_a_revision_so_hide_2_hides_exactly_2(
        h2: httpx.Client, control: httpx.Client) -> None:
    activate(control, "stale", [{"name": "s", "match": {"verbs": ["list"], "resources": ["secrets"]},
                                 "fault": {"staleList": {"lagWrites": 2}}}])
    for name, rv in (("early", 60), ("doomed", 61), ("late", 62)):
        body = json.dumps({"kind": "Secret", "apiVersion": "v1",
                           "metadata": {"name": name, "resourceVersion": str(rv)}}, separators=(",", ":"))
        assert h2.post("/api/v1/namespaces/default/secrets", content=body,
                       headers={"content-type": "application/json"}).status_code == 201
    deleted = h2.delete("/api/v1/namespaces/default/secrets/doomed")
    assert deleted.status_code == 200 and "resourceVersion" not in deleted.json()["metadata"]
    listed = h2.get("/api/v1/secrets")
    assert listed.status_code == 200
    assert listed.headers["x-query"] == "resourceVersion=61&resourceVersionMatch=Exact", \
        "just before late's create: late's create and doomed's delete hidden, doomed's create kept"
    [served] = injections(control)
    assert (served["servedResourceVersion"], served["writesSince"], served["newestResourceVersion"]) == ("61", 2, "62")


def test_two_views_pin_each_connection_and_a_reconnect_moves_to_the_other(proxy: Started, h2: httpx.Client,
                                                                         control: httpx.Client) -> None:
    """Two clients, a connection each, get the two views (the stand-in's current list at 99, the one 2 writes back);
    the client on the current view reconnects and gets the older one."""
    activate(control, "two", [{"name": "t", "match": {"verbs": ["list"], "resources": ["configmaps"]},
                               "fault": {"twoViews": {"lagWrites": 2}}}])
    for rv in (60, 61, 62):
        body = json.dumps({"kind": "ConfigMap", "apiVersion": "v1",
                           "metadata": {"name": f"c{rv}", "resourceVersion": str(rv)}}, separators=(",", ":"))
        assert h2.post("/api/v1/namespaces/default/configmaps", content=body,
                       headers={"content-type": "application/json"}).status_code == 201

    def listed(agent: str) -> tuple[str, str]:
        """A LIST over a connection of its own: the list's revision and the query the stand-in got."""
        with httpx.Client(http2=True, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"], timeout=10,
                          headers={"user-agent": agent}) as c:
            answer = c.get("/api/v1/configmaps")
            assert answer.status_code == 200
            return answer.json()["metadata"]["resourceVersion"], answer.headers["x-query"]

    first = {agent: listed(agent) for agent in ("a", "b")}
    assert sorted(first.values()) == [("60", "resourceVersion=60&resourceVersionMatch=Exact"), ("99", "")]
    fresh = next(agent for agent, (rv, _) in first.items() if rv == "99")
    assert listed(fresh)[0] == "60", "the reconnect lands on the other view: back from 99 to 60"
    records = control.get("/v1/journal", params={"since": control.headers["x-test-journal-cursor"]}).json()["records"]
    pinned = [(r["client"], r["view"], r["clientConnection"]) for r in records if r["event"] == "view-pinned"]
    assert pinned[2] == (fresh, 1, 2) and sorted(v for _, v, _ in pinned[:2]) == [0, 1]
    assert [(r["view"], r["servedResourceVersion"], r["writesSince"]) for r in injections(control)] == [
        (1, "60", 2), (1, "60", 2)]


@pytest.mark.parametrize("http2", [True, False], ids=["h2", "http1"])
def test_delayed_events_arrive_late_in_order_on_a_quiet_stream_by_the_proxys_own_timer(
        proxy: Started, control: httpx.Client, http2: bool) -> None:
    activate(control, "lag", [{"name": "l", "match": PODS, "fault": {"delayEvents": {"seconds": 0.6}}}])
    arrived: list[tuple[float, str]] = []
    with httpx.Client(http2=http2, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"], timeout=10) as c, \
            c.stream("GET", "/api/v1/pods", params={"watch": "1", "n": "4", "interval": "0.1", "linger": "2.5"}) as s:
        assert s.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
        t0 = time.monotonic()
        for line in s.iter_lines():
            if line:
                arrived.append((time.monotonic() - t0, json.loads(line)["object"]["metadata"]["name"]))
        ended = time.monotonic() - t0
    assert [name for _, name in arrived] == ["p0", "p1", "p2", "p3"]
    for i, (at, _) in enumerate(arrived):  # sent at ~0.1 i: each 0.6 s later, well before the stream ends
        assert 0.1 * i + 0.5 <= at <= 0.1 * i + 1.2, arrived
    assert ended >= 2.5
    records = control.get("/v1/journal", params={"since": control.headers["x-test-journal-cursor"]}).json()["records"]
    delayed = [r for r in records if r["event"] == "watch-event" and r["action"] == "delayed"]
    assert {r["reason"] for r in delayed} == {"due"} and sum(r["events"] for r in delayed) == 4
    assert all(0.55 <= r["minLateSeconds"] <= r["maxLateSeconds"] <= 1.2 for r in delayed), delayed


def test_switching_the_profile_off_releases_held_events_at_once_and_ends_the_edits(
        proxy: Started, control: httpx.Client) -> None:
    """Events held for 30 s reach the client as soon as the profile that held them is off (on a quiet stream: the
    proxy's own tick), and the rest of the stream is the apiserver's."""
    activate(control, "hold", [{"name": "h", "match": PODS, "fault": {"holdEvents": {"maxSeconds": 30}}}])
    arrived: list[tuple[float, str]] = []
    with httpx.Client(http2=True, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"], timeout=10) as c, \
            c.stream("GET", "/api/v1/pods", params={"watch": "1", "n": "2", "interval": "0.1", "linger": "3"}) as s:
        t0 = time.monotonic()
        lines = s.iter_lines()
        off = threading.Timer(1.0, lambda: control.delete("/v1/active"))
        off.start()
        for line in lines:
            if line:
                arrived.append((time.monotonic() - t0, json.loads(line)["object"]["metadata"]["name"]))
        off.join()
    assert [name for _, name in arrived] == ["p0", "p1"]
    assert all(0.9 <= at <= 2.0 for at, _ in arrived), arrived  # at the switch-off, not after 30 s
    records = control.get("/v1/journal", params={"since": control.headers["x-test-journal-cursor"]}).json()["records"]
    [held] = [r for r in records if r["event"] == "watch-event" and r["action"] == "held"]
    [end] = [r for r in records if r["event"] == "watch-edits-end"]
    assert (held["reason"], held["events"], end["released"], end["rule"]) == ("deactivated", 2, 2, "h")


def test_fail_then_commit_answers_the_error_first_and_sends_the_write_afterwards(
        h2: httpx.Client, control: httpx.Client) -> None:
    activate(control, "late", [{"name": "f", "match": {"verbs": ["create"], "resources": ["configmaps"]},
                                "fault": {"failThenCommit": {"status": 504, "commitAfterSeconds": 0.5}}}])
    body = json.dumps({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "late", "resourceVersion": "77"}},
                      separators=(",", ":"))  # compact, as the apiserver writes
    t0 = time.monotonic()
    answer = h2.post("/api/v1/namespaces/default/configmaps", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 504 and answer.json()["reason"] == "Timeout" and time.monotonic() - t0 < 0.4
    cursor = control.headers["x-test-journal-cursor"]
    for _ in range(50):
        records = control.get("/v1/journal", params={"since": cursor}).json()["records"]
        if any(r["event"] == "late-commit" for r in records):
            break
        time.sleep(0.1)
    [inject] = [r for r in records if r["event"] == "inject"]
    [late] = [r for r in records if r["event"] == "late-commit"]
    assert (late["committed"], late["upstreamStatus"], late["resourceVersion"]) == (True, 201, "77")
    assert late["time"] - inject["time"] >= 0.45 and late["rule"] == inject["rule"] == "f"


def test_a_stale_watch_list_sends_the_list_at_the_revision_the_bookmark_then_the_watch_from_it(
        h2: httpx.Client, control: httpx.Client) -> None:
    watch_lines(h2, n="3")  # the proxy sees pod writes (revisions 100-102, and more from earlier tests)
    activate(control, "time-travel", [{"name": "t", "match": PODS, "fault": {"staleList": {"lagWrites": 2}}}])
    with h2.stream("GET", "/api/v1/pods", params={
            "watch": "1", "sendInitialEvents": "true", "allowWatchBookmarks": "true", "resourceVersionMatch": "NotOlderThan",
            "resourceVersion": "", "n": "2", "interval": "0.05"}) as s:
        query = s.headers["x-query"]
        events = [json.loads(line) for line in s.iter_lines() if line]
    [served] = injections(control)
    revision = served["servedResourceVersion"]
    assert int(served["newestResourceVersion"]) > int(revision) and served["writesSince"] == 2
    assert (served["servedAs"], served["initialEvents"], served["pages"]) == ("watchlist", 3, 1)
    assert query == f"watch=1&allowWatchBookmarks=true&n=2&interval=0.05&resourceVersion={revision}", \
        "a plain watch from the revision: no sendInitialEvents, no resourceVersionMatch"
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in events] == [
        ("ADDED", "p0"), ("ADDED", "p1"), ("ADDED", "p2"), ("BOOKMARK", None), ("ADDED", "p0"), ("ADDED", "p1")]
    assert events[0]["object"]["kind"] == "Pod" and events[0]["object"]["apiVersion"] == "v1"
    assert events[3]["object"]["metadata"] == {"resourceVersion": revision,
                                               "annotations": {"k8s.io/initial-events-end": "true"}}


def test_held_events_wait_until_an_event_passes_on_another_watch(proxy: Started, control: httpx.Client) -> None:
    """Two pods watches of one client: the first opened is held (the rule injects once) until the second's
    first event passes; then its events arrive at once, in order."""
    activate(control, "skew", [{"name": "h", "match": PODS, "when": {"maxInjections": 1},
                                "fault": {"holdEvents": {"maxSeconds": 10, "untilEvent": {"resource": "pods"}}}}])

    async def run() -> tuple[list[tuple[float, str]], float]:
        async with httpx.AsyncClient(http2=True, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"],
                                     timeout=20) as c:
            held: list[tuple[float, str]] = []
            t0 = time.monotonic()

            async def watch_held() -> None:
                async with c.stream("GET", "/api/v1/pods", params={"watch": "1", "n": "3", "interval": "0.05",
                                                                   "linger": "2.5"}) as s:
                    async for line in s.aiter_lines():
                        if line:
                            held.append((time.monotonic() - t0, json.loads(line)["object"]["metadata"]["name"]))

            task = asyncio.create_task(watch_held())
            await asyncio.sleep(1.0)
            other = time.monotonic() - t0
            async with c.stream("GET", "/api/v1/pods", params={"watch": "1", "n": "1", "interval": "0.05"}) as s:
                async for _ in s.aiter_lines():
                    pass
            await asyncio.wait_for(task, 10)
            return held, other

    held, other = asyncio.run(run())
    assert [name for _, name in held] == ["p0", "p1", "p2"]
    assert all(other <= at <= other + 0.8 for at, _ in held), (held, other)
    records = control.get("/v1/journal", params={"since": control.headers["x-test-journal-cursor"]}).json()["records"]
    [hold] = [r for r in records if r["event"] == "watch-event" and r["action"] == "held"]
    assert (hold["reason"], hold["events"], hold["releasedBy"]["name"]) == ("event", 3, "p0")
    assert hold["heldSeconds"] >= 0.8


def windows_of(control: httpx.Client) -> list[dict[str, Any]]:
    """This test's coalesced deliveries, from the journal."""
    records = control.get("/v1/journal", params={"since": control.headers["x-test-journal-cursor"]}).json()["records"]
    return [r for r in records if r["event"] == "watch-event" and r["action"] == "coalesced"]


def test_coalesced_events_arrive_as_each_objects_latest_state_per_window(h2: httpx.Client,
                                                                         control: httpx.Client) -> None:
    activate(control, "coalesce", [{"name": "c", "match": PODS, "fault": {"coalesceEvents": {"windowSeconds": 0.5}}}])
    t0 = time.monotonic()
    with h2.stream("GET", "/api/v1/pods", params={"watch": "1", "n": "100", "interval": "0.05", "objects": "3",
                                                  "timeoutSeconds": "60"}) as s:
        assert s.headers["x-timeout-seconds"] == "1", "the apiserver ends it at the window (rounded up)"
        events = [json.loads(line) for line in s.iter_lines() if line]
    took = time.monotonic() - t0
    assert 0.9 <= took <= 3, took
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs)
    # The first window: each pod once, first seen there (ADDED), in its latest state, in resourceVersion order.
    assert sorted(names(events)[:3]) == ["ADDED p0", "ADDED p1", "ADDED p2"], names(events)
    assert all(rv > 102 for rv in rvs[:3]), "not the pods' first states: their latest in the window"
    assert set(names(events)[3:]) <= {"MODIFIED p0", "MODIFIED p1", "MODIFIED p2"}
    assert len(events) <= 3 * len(windows_of(control)), "at most one event per pod and window"
    windows = windows_of(control)
    assert len(windows) >= 2 and sum(w["delivered"] for w in windows) == len(events)
    sent = sum(w["held"] for w in windows)  # everything the stand-in sent in its second: ~20 events of 3 pods
    assert sent >= 10 and sum(w["elided"] for w in windows) == sent - len(events)
    assert windows[-1]["reason"] == "end"
