"""Live switching, TTL, refusals that change nothing, stats vs the wire, and pass-through fidelity."""

from __future__ import annotations

import hashlib
import itertools
import os
import time

import httpx
import pytest

from tests.integration.test_request_faults import BIND, bind, pod
from tests.support.control import activate, injections
from tests.support.processes import Started

FAIL = [{"name": "fail", "match": BIND, "fault": {"abort": {"status": 500}}}]


def test_switches_take_effect_on_the_next_request(h2: httpx.Client, control: httpx.Client) -> None:
    control.put("/v1/profiles/fail", json={"apiVersion": "kube-fault-proxy/v1", "kind": "FaultProfile",
                                           "metadata": {"name": "fail"}, "spec": {"rules": FAIL}})
    seen = []
    for _ in range(3):
        control.put("/v1/active", json={"profile": "fail"}).raise_for_status()
        seen.append(bind(h2, pod()).status_code)
        control.delete("/v1/active").raise_for_status()
        seen.append(bind(h2, pod()).status_code)
    assert seen == [500, 201] * 3


def test_ttl_reverts_to_pass_through_by_itself(h2: httpx.Client, control: httpx.Client) -> None:
    activate(control, "fail", FAIL, ttl=1.0)
    assert bind(h2, pod()).status_code == 500
    time.sleep(1.3)
    assert control.get("/v1/active").json()["profile"] is None  # the timer, not a request, ended it
    assert bind(h2, pod()).status_code == 201
    since = int(control.headers["x-test-journal-cursor"])
    records = control.get("/v1/journal", params={"since": since}).json()["records"]
    assert [r["reason"] for r in records if r["event"] == "deactivate"] == ["ttl"]


def test_a_refused_profile_changes_nothing(h2: httpx.Client, control: httpx.Client) -> None:
    activate(control, "fail", FAIL)
    bad = {"apiVersion": "kube-fault-proxy/v1", "kind": "FaultProfile", "metadata": {"name": "fail"},
           "spec": {"rules": [{"name": "fail", "match": BIND, "fault": {"abort": {"status": 200}}}]}}
    r = control.put("/v1/profiles/fail", json=bad)
    assert r.status_code == 422
    assert "spec.rules[0].fault.abort.status: Input should be greater than or equal to 400" in r.json()["message"]
    assert control.put("/v1/active", json={"profile": "missing"}).status_code == 404
    assert control.get("/v1/active").json()["profile"] == "fail"
    assert bind(h2, pod()).status_code == 500


def test_stats_and_journal_agree_with_what_the_client_saw(h2: httpx.Client, control: httpx.Client) -> None:
    activate(control, "some", [{"name": "some", "match": BIND, "probability": 0.3,
                                "fault": {"abort": {"status": 503}}}], seed=11)
    failed = set()
    for _ in range(60):
        name = pod()
        if bind(h2, name).status_code == 503:
            failed.add(name)
    stats = control.get("/v1/stats").json()
    assert 5 < len(failed) < 35
    assert stats["injectionsTotal"] == len(failed)
    assert stats["rules"]["some"] == {"matched": 60, "eligible": 60, "injected": len(failed),
                                      "triggerSeen": 0}
    assert {r["request"]["name"] for r in injections(control)} == failed


def test_same_seed_same_decisions_through_the_proxy(h2: httpx.Client, control: httpx.Client) -> None:
    rules = [{"name": "half", "match": BIND, "probability": 0.5, "fault": {"abort": {"status": 500}}}]

    def run() -> list[int]:
        activate(control, "half", rules, seed=2024)
        return [bind(h2, pod()).status_code for _ in range(30)]

    assert run() == run()


@pytest.mark.parametrize("size", [0, 1, 65_535, 1_000_000, 3_000_000])
def test_pass_through_is_byte_for_byte(
    size: int, h2: httpx.Client, direct: httpx.Client, control: httpx.Client
) -> None:
    activate(control, "other-only", [{"name": "x", "match": BIND, "fault": {"abort": {"status": 500}}}])
    via, straight = (c.get("/bytes", params={"size": size, "seed": size}) for c in (h2, direct))
    assert via.status_code == straight.status_code == 200
    assert via.content == straight.content
    assert hashlib.sha256(via.content).hexdigest() == via.headers["x-sha256"]
    assert via.headers["content-type"] == straight.headers["content-type"]


def test_request_bodies_pass_byte_for_byte(h2: httpx.Client) -> None:
    body = os.urandom(200_000)
    r = h2.post("/echo", content=body, headers={"Content-Type": "application/vnd.kubernetes.protobuf"})
    assert r.content == body
    assert r.headers["content-type"] == "application/vnd.kubernetes.protobuf"


def test_a_watch_is_streamed_not_buffered(h2: httpx.Client) -> None:
    arrivals = []
    t = time.monotonic()
    with h2.stream("GET", "/api/v1/pods", params={"watch": "1", "n": "5", "interval": "0.4"}) as s:
        for line in s.iter_lines():
            if line:
                arrivals.append(time.monotonic() - t)
    assert len(arrivals) == 5
    assert arrivals[0] < 0.3  # the first event did not wait for the end of the stream
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert all(0.25 < g < 0.8 for g in gaps), gaps


def test_control_plane_listens_on_loopback_by_default(proxy: Started) -> None:
    assert proxy.ready["controlUrl"].startswith("http://127.0.0.1:")
    assert proxy.ready["proxyUrl"].startswith("https://127.0.0.1:")



def test_binding_outcomes_are_counted_as_the_client_saw_them(h2: httpx.Client, control: httpx.Client) -> None:
    before = control.get("/v1/stats").json()["bindsTotal"]
    activate(control, "mixed", [
        {"name": "ctf", "match": BIND, "when": {"maxInjections": 1}, "fault": {"commitThenFail": {"abort": {"status": 500}}}},
        {"name": "reset", "match": BIND, "when": {"maxInjections": 1}, "fault": {"reset": {}}},
        {"name": "abort", "match": BIND, "when": {"maxInjections": 1}, "fault": {"abort": {"status": 503}}},
        {"name": "throttle", "match": BIND, "when": {"maxInjections": 1}, "fault": {"throttle": {}}},
        {"name": "bare-429", "match": BIND, "when": {"maxInjections": 1}, "fault": {"abort": {"status": 429}}},
    ])
    seen = []
    for _ in range(7):
        try:
            seen.append(bind(h2, pod()).status_code)
        except httpx.HTTPError:
            seen.append(0)
    # and the apiserver's own APF 429 (with Retry-After), passed through
    name = pod()
    apf = h2.post(f"/api/v1/namespaces/default/pods/{name}/binding?throttle=1",
                  json={"kind": "Binding", "apiVersion": "v1", "metadata": {"name": name},
                        "target": {"kind": "Node", "name": "n1"}})
    after = control.get("/v1/stats").json()["bindsTotal"]
    assert sorted(seen) == [0, 201, 201, 429, 429, 500, 503]
    assert (apf.status_code, apf.headers.get("retry-after")) == (429, "1")
    assert after["succeeded"] - before["succeeded"] == 2
    assert after["throttled"] - before["throttled"] == 2  # the throttle fault's and the apiserver's
    assert after["failed"] - before["failed"] == 4  # a 429 without Retry-After is a failure client-go reports


def test_bind_latency_runs_from_a_pods_first_binding_post_to_its_commit(h2: httpx.Client,
                                                                        control: httpx.Client) -> None:
    before = control.get("/v1/stats").json()["bindLatency"]
    activate(control, "first-fails", [
        {"name": "fail", "match": BIND, "when": {"maxInjections": 1}, "fault": {"abort": {"status": 500}}}])
    name = pod()
    first = time.monotonic()
    assert bind(h2, name).status_code == 500, "refused by the proxy: no commit"
    time.sleep(0.3)
    assert bind(h2, name).status_code == 201, "the retry commits"
    took = time.monotonic() - first
    after = control.get("/v1/stats").json()["bindLatency"]
    assert after["count"] - before["count"] == 1 and after["waiting"] == before["waiting"]
    assert 0.3 <= after["sumSeconds"] - before["sumSeconds"] <= took + 0.05, "timed from the first attempt"
    exposed = control.get("/metrics").text
    assert f"kfp_bind_latency_seconds_count {float(after['count'])}\n" in exposed
    assert f'kfp_bind_latency_seconds_bucket{{le="+Inf"}} {float(after["count"])}\n' in exposed
