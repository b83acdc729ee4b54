"""Each request fault kind, observed on the wire by real HTTP/2 (and HTTP/1.1) clients."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from typing import Any

import httpx
import pytest

from tests.support.control import activate, injections
from tests.support.processes import Started

BIND = {"verbs": ["create"], "resources": ["pods"], "subresources": ["binding"]}


def pod() -> str:
    return f"p-{uuid.uuid4().hex[:10]}"


def bind(client: httpx.Client, name: str, node: str = "n1") -> httpx.Response:
    body = {"kind": "Binding", "apiVersion": "v1", "metadata": {"name": name},
            "target": {"kind": "Node", "name": node}}
    return client.post(f"/api/v1/namespaces/default/pods/{name}/binding", json=body)


@pytest.mark.parametrize("http2", [True, False], ids=["h2", "http1"])
def test_abort_is_a_status_and_spares_other_requests(
    proxy: Started, control: httpx.Client, http2: bool
) -> None:
    activate(control, "abort", [{"name": "fail-binds", "match": BIND,
                                 "fault": {"abort": {"status": 500}}}])
    with httpx.Client(http2=http2, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"]) as c:
        name = pod()
        r = bind(c, name)
        assert r.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
        assert r.status_code == 500
        assert "retry-after" not in r.headers
        assert r.headers["content-type"] == "application/json"
        assert r.json() == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": "Internal error occurred: injected by kube-fault-proxy",
                            "reason": "InternalError", "details": {"name": name, "kind": "pods"},
                            "code": 500}
        assert c.get("/api/v1/namespaces/default/pods").status_code == 200
    [record] = injections(control)
    assert record["request"]["name"] == name and record["request"]["targetNode"] == "n1"
    assert record["rule"] == "fail-binds" and record["action"] == "respond 500"


def test_throttle_as_apf_sends_it(h2: httpx.Client, control: httpx.Client) -> None:
    activate(control, "apf", [{"name": "t", "match": BIND, "fault": {"throttle": {"retryAfterSeconds": 3}}}])
    r = bind(h2, pod())
    assert r.status_code == 429
    assert r.headers["retry-after"] == "3"
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert r.content == b"Too many requests, please try again later.\n"


def test_delay_holds_only_the_matching_request(proxy: Started, control: httpx.Client) -> None:
    activate(control, "slow", [{"name": "d", "match": BIND, "fault": {"delay": {"seconds": 1.0}}}])

    async def run() -> tuple[float, float, int, int]:
        async with httpx.AsyncClient(http2=True, verify=proxy.ready["caFile"],
                                     base_url=proxy.ready["proxyUrl"], timeout=10) as c:
            await c.get("/healthz")  # one connection for both requests below

            async def timed(coro: Any) -> tuple[float, int]:
                t = time.monotonic()
                r = await coro
                return time.monotonic() - t, r.status_code

            name = pod()
            (slow, s1), (fast, s2) = await asyncio.gather(
                timed(c.post(f"/api/v1/namespaces/default/pods/{name}/binding",
                             json={"target": {"name": "n1"}})),
                timed(c.get("/api/v1/namespaces/default/pods")),
            )
            return slow, fast, s1, s2

    slow, fast, s1, s2 = asyncio.run(run())
    assert (s1, s2) == (201, 200)
    assert slow >= 0.95
    assert fast < 0.5


def test_hang_until_the_client_gives_up_then_serves_on(h2: httpx.Client, control: httpx.Client) -> None:
    activate(control, "hang", [{"name": "h", "match": BIND, "fault": {"hang": {}}}])
    t = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        h2.post(f"/api/v1/namespaces/default/pods/{pod()}/binding", json={}, timeout=1.0)
    assert 0.9 < time.monotonic() - t < 3
    assert h2.get("/api/v1/namespaces/default/pods").status_code == 200


def test_hang_with_a_duration_ends_in_a_504_like_the_apiserver(h2: httpx.Client, control: httpx.Client) -> None:
    activate(control, "hang", [{"name": "h", "match": BIND, "fault": {"hang": {"seconds": 0.5}}}])
    t = time.monotonic()
    r = bind(h2, pod())
    assert time.monotonic() - t >= 0.45
    assert r.status_code == 504
    assert r.json()["reason"] == "Timeout"
    assert r.json()["message"].startswith("Timeout: request did not complete within requested timeout")


def test_reset_resets_one_stream_and_leaves_a_running_watch_alone(
    proxy: Started, control: httpx.Client
) -> None:
    activate(control, "reset", [{"name": "r", "match": BIND, "fault": {"reset": {}}}])

    async def run() -> tuple[list[str], BaseException | None, int]:
        async with httpx.AsyncClient(http2=True, verify=proxy.ready["caFile"],
                                     base_url=proxy.ready["proxyUrl"], timeout=10) as c:
            events: list[str] = []

            async def watch() -> None:
                async with c.stream("GET", "/api/v1/pods",
                                    params={"watch": "1", "n": "6", "interval": "0.2"}) as s:
                    async for line in s.aiter_lines():
                        events.append(line)

            task = asyncio.create_task(watch())
            await asyncio.sleep(0.3)
            error: BaseException | None = None
            try:
                await c.post(f"/api/v1/namespaces/default/pods/{pod()}/binding", json={})
            except httpx.HTTPError as e:
                error = e
            after = (await c.get("/api/v1/namespaces/default/pods")).status_code
            await task
            return events, error, after

    events, error, after = asyncio.run(run())
    assert isinstance(error, httpx.RemoteProtocolError)
    assert len(events) == 6
    assert after == 200


def test_commit_then_fail_binds_upstream_but_fails_the_client(
    h2: httpx.Client, direct: httpx.Client, control: httpx.Client
) -> None:
    activate(control, "ctf", [{"name": "c", "match": BIND, "when": {"maxInjections": 1},
                               "fault": {"commitThenFail": {"abort": {"status": 504}}}}])
    name = pod()
    first = bind(h2, name, "node-a")
    assert first.status_code == 504
    assert direct.get("/debug/bindings").json()["bound"][f"default/{name}"] == "node-a"
    retry = bind(h2, name, "node-b")  # the scheduler retries: the apiserver says it is bound
    assert retry.status_code == 409 and "already assigned" in retry.json()["message"]
    [record] = injections(control)
    assert record["upstreamStatus"] == 201 and record["action"] == "forward, then respond 504"


def test_commit_then_fail_passes_through_an_answer_that_committed_nothing(
    h2: httpx.Client, direct: httpx.Client, control: httpx.Client
) -> None:
    name = pod()
    assert bind(direct, name, "node-a").status_code == 201  # already bound: the apiserver will say 409
    activate(control, "ctf", [{"name": "c", "match": BIND, "fault": {"commitThenFail": {"abort": {"status": 504}}}}])
    again = bind(h2, name, "node-b")
    assert again.status_code == 409 and "already assigned" in again.json()["message"]
    assert injections(control) == []
    since = int(control.headers["x-test-journal-cursor"])
    records = control.get("/v1/journal", params={"since": since}).json()["records"]
    [skipped] = [r for r in records if r["event"] == "commit-skipped"]
    assert skipped["upstreamStatus"] == 409 and skipped["rule"] == "c"
    assert skipped["request"]["name"] == name


def test_commit_then_reset(h2: httpx.Client, direct: httpx.Client, control: httpx.Client) -> None:
    activate(control, "ctr", [{"name": "c", "match": BIND, "fault": {"commitThenFail": {"reset": {}}}}])
    name = pod()
    with pytest.raises(httpx.RemoteProtocolError):
        bind(h2, name)
    assert f"default/{name}" in direct.get("/debug/bindings").json()["bound"]


def test_target_node_selector(h2: httpx.Client, control: httpx.Client) -> None:
    activate(control, "node", [{"name": "n", "match": {**BIND, "targetNodes": ["bad-*"]},
                                "fault": {"abort": {"status": 409}}}])
    assert bind(h2, pod(), "good-1").status_code == 201
    assert bind(h2, pod(), "bad-1").status_code == 409


def test_bearer_token_passes_through_untouched(h2: httpx.Client, control: httpx.Client) -> None:
    who = h2.get("/whoami", headers={"Authorization": "Bearer abc.def"}).json()
    assert who["authorization"] == "Bearer abc.def"


def test_upstream_requires_the_client_certificate_the_proxy_presents(
    upstream: Started, pki: Any, h2: httpx.Client
) -> None:
    with (
        httpx.Client(verify=str(pki / "ca.pem"), base_url=upstream.extra["url"]) as anonymous,
        pytest.raises(httpx.HTTPError),
    ):
        anonymous.get("/healthz")
    assert h2.get("/healthz").status_code == 200


def test_journal_file_has_every_record(proxy: Started, h2: httpx.Client, control: httpx.Client) -> None:
    activate(control, "abort", [{"name": "a", "match": BIND, "fault": {"abort": {"status": 500}}}])
    name = pod()
    bind(h2, name)
    lines = [json.loads(x) for x in (proxy.log.parent / "journal.jsonl").read_text().splitlines()]
    assert lines[-1]["event"] == "inject" and lines[-1]["request"]["name"] == name
    assert [r["seq"] for r in lines] == list(range(lines[0]["seq"], lines[0]["seq"] + len(lines)))


def test_an_unreadable_binding_body_is_decided_counted_and_journaled_once(
    h2: httpx.Client, control: httpx.Client
) -> None:
    """A Binding nested 100k deep reads as "no target node": the rules still decide it."""
    activate(control, "deep", [
        {"name": "on-n1", "match": {**BIND, "targetNodes": ["n1"]}, "fault": {"abort": {"status": 500}}},
        {"name": "any-bind", "match": BIND, "fault": {"abort": {"status": 503}}},
    ])
    deep = b'{"kind": "Binding", "target": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    names = [pod() for _ in range(3)]
    for name in names:
        r = h2.post(f"/api/v1/namespaces/default/pods/{name}/binding", content=deep,
                    headers={"content-type": "application/json"})
        assert r.status_code == 503, r.text
    records = injections(control)
    assert [(r["rule"], r["request"]["name"]) for r in records] == [("any-bind", n) for n in names]
    assert all(r["request"]["unparsable"] == "binding body: JSON nested too deep" for r in records)
    assert control.get("/v1/stats").json()["events"]["request-unparsable"] == 3
    everything = control.get("/v1/journal", params={"since": 0, "limit": 10000}).json()["records"]
    noted = [r for r in everything if r["event"] == "request-unparsable"
             and r["kind"] == "binding body: JSON nested too deep"]
    assert len(noted) == 1


def test_a_trigger_on_answers_arms_after_the_nth_success_not_the_nth_arrival(h2: httpx.Client,
                                                                            control: httpx.Client) -> None:
    taken = pod()
    assert bind(h2, taken).status_code == 201  # already bound: its next Binding is a 409, not a success
    activate(control, "after-answers", [{"name": "r", "match": BIND, "fault": {"abort": {"status": 503}},
                                         "when": {"trigger": {"match": BIND, "count": 3, "answered": True}}}])
    seen = [bind(h2, taken).status_code]  # arrives, answered 409: counts for nothing
    seen += [bind(h2, pod()).status_code for _ in range(5)]
    assert seen == [409, 201, 201, 201, 503, 503]
    assert control.get("/v1/stats").json()["rules"]["r"]["triggerSeen"] == 3


def journal(control: httpx.Client, *names: str) -> list[dict[str, Any]]:
    """This test's journal records of these events."""
    since = int(control.headers["x-test-journal-cursor"])
    return [r for r in control.get("/v1/journal", params={"since": since}).json()["records"] if r["event"] in names]


def test_crash_point_holds_the_committed_answer_after_the_nth_bind_and_spares_its_connection(
    proxy: Started, direct: httpx.Client, control: httpx.Client
) -> None:
    """Two Bindings committed, then the third's 201 is held 1.5 s while the apiserver already has it bound;
    a GET on the same HTTP/2 connection is answered meanwhile; the journal says which write and when."""
    activate(control, "crash", [{"name": "third-bind", "match": BIND,
                                 "when": {"trigger": {"match": BIND, "count": 2, "answered": True}},
                                 "fault": {"crashPoint": {"holdSeconds": 1.5}}}])
    names = [pod() for _ in range(4)]

    async def run() -> tuple[list[int], float, float, int, bool]:
        async with httpx.AsyncClient(http2=True, verify=proxy.ready["caFile"],
                                     base_url=proxy.ready["proxyUrl"], timeout=10) as c:
            async def post(name: str) -> httpx.Response:
                return await c.post(f"/api/v1/namespaces/default/pods/{name}/binding",
                                    json={"kind": "Binding", "target": {"kind": "Node", "name": "n1"}})

            first = [(await post(n)).status_code for n in names[:2]]
            t = time.monotonic()
            held_task = asyncio.create_task(post(names[2]))
            await asyncio.sleep(0.3)
            get = await c.get("/api/v1/namespaces/default/pods")
            fast = time.monotonic() - t
            bound_while_held = f"default/{names[2]}" in direct.get("/debug/bindings").json()["bound"]
            held = await held_task
            slow = time.monotonic() - t
            after = (await post(names[3])).status_code
            return [*first, held.status_code, after], slow, fast, get.status_code, bound_while_held

    statuses, slow, fast, get_status, bound_while_held = asyncio.run(run())
    assert statuses == [201, 201, 201, 201]
    assert get_status == 200 and fast < 1.0, "another stream on the connection is not held"
    assert bound_while_held, "the apiserver committed the Binding before its answer was relayed"
    assert slow >= 1.45
    [point] = journal(control, "crash-point")
    assert point["request"]["name"] == names[2] and point["request"]["targetNode"] == "n1"
    assert (point["rule"], point["fault"], point["upstreamStatus"], point["holdSeconds"]) == \
        ("third-bind", "crashPoint", 201, 1.5)
    assert point["profile"] == "crash" and point["match"] == 3 and point["injection"] == 1
    assert "resourceVersion" in point  # a Binding's Status carries none: null
    [released] = journal(control, "crash-point-released")
    assert released["outcome"] == "relayed" and released["heldSeconds"] >= 1.45
    assert [r["request"]["name"] for r in injections(control)] == [names[2]], "one crash point: the fourth passed"


def test_crash_point_drops_the_held_answer_when_its_client_is_gone(
    proxy: Started, direct: httpx.Client, control: httpx.Client
) -> None:
    activate(control, "crash", [{"name": "c", "match": BIND, "fault": {"crashPoint": {"holdSeconds": 30}}}])
    name = pod()

    async def run() -> None:
        c = httpx.AsyncClient(http2=True, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"], timeout=10)
        task = asyncio.create_task(c.post(f"/api/v1/namespaces/default/pods/{name}/binding",
                                          json={"target": {"kind": "Node", "name": "n1"}}))
        await asyncio.sleep(0.5)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await c.aclose()  # the scheduler is gone: its connection closes

    t = time.monotonic()
    asyncio.run(run())
    while not journal(control, "crash-point-released") and time.monotonic() - t < 10:
        time.sleep(0.1)
    [released] = journal(control, "crash-point-released")
    assert released["outcome"] == "dropped" and released["request"]["name"] == name
    assert released["heldSeconds"] < 10
    assert f"default/{name}" in direct.get("/debug/bindings").json()["bound"]


def test_crash_point_does_not_hold_an_answer_that_committed_nothing(
    h2: httpx.Client, direct: httpx.Client, control: httpx.Client
) -> None:
    name = pod()
    assert bind(direct, name, "node-a").status_code == 201  # already bound: the apiserver will say 409
    activate(control, "crash", [{"name": "c", "match": BIND, "fault": {"crashPoint": {"holdSeconds": 5}}}])
    t = time.monotonic()
    again = bind(h2, name, "node-b")
    assert again.status_code == 409 and time.monotonic() - t < 1.0
    assert injections(control) == [] and journal(control, "crash-point") == []
    [skipped] = journal(control, "commit-skipped")
    assert (skipped["fault"], skipped["upstreamStatus"]) == ("crashPoint", 409)
    t = time.monotonic()
    assert bind(h2, pod()).status_code == 201  # the rule's turn was given back: the next commit is held
    assert time.monotonic() - t >= 4.9
    assert len(journal(control, "crash-point")) == 1
