"""Bind commits (proxy.mitm.bind_commits) in serve's order, with the first attempt marked by BindReads: what ends a
pod's bind latency (the apiserver's 2xx, a late commit) and what does not (a fault's own answer, a refusal)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from kube_fault_proxy.proxy.mitm.addon import FaultAddon
from kube_fault_proxy.proxy.mitm.bind_commits import BindCommits
from kube_fault_proxy.proxy.mitm.binds import BindAccounting, BindOutcomes, BindReads
from kube_fault_proxy.proxy.mitm.crash_points import CrashPoints
from kube_fault_proxy.proxy.mitm.held import HeldAnswers
from kube_fault_proxy.proxy.mitm.late_commits import LateCommits
from kube_fault_proxy.proxy.mitm.stale_reads import StaleAnswers
from kube_fault_proxy.proxy.runtime import Runtime
from kube_fault_proxy.proxy.stale_views import StaleViews
from mitmproxy import http
from mitmproxy.addons import proxyserver
from mitmproxy.test import taddons

from tests.support.builders import BIND_MATCH, profile
from tests.support.mitm import Clock, answer, binding, flow, flow_hooks, runtime


def chain(rt: Runtime, late: LateCommits | None = None) -> list[Any]:
    """serve's order, for the addons a Binding meets."""
    lat = rt.counters.bind_latency
    outcomes = BindOutcomes(rt.counters.bind_outcome)
    held = HeldAnswers()
    stale = StaleViews(rt.counters, rt.clock)
    return [BindReads(outcomes, lat.attempt), BindCommits(lat.committed), StaleAnswers(stale), FaultAddon(rt, held),
            *([late] if late else []), CrashPoints(rt.counters.note, held), BindAccounting(outcomes)]


async def send(addons: list[Any], f: http.HTTPFlow, clock: Clock, seconds: float,
               upstream: http.Response | None) -> None:
    """The request hooks; `seconds` later the upstream's answer (unless an addon answered) and the response hooks."""
    await flow_hooks(addons, f, "requestheaders", "request")
    clock.now += seconds
    if f.response is None and f.error is None and upstream is not None:
        f.response = upstream
        await flow_hooks(addons, f, "responseheaders", "response")
    elif f.response is not None:
        await flow_hooks(addons, f, "response")


def scenario(tmp_path: Path, rules: list[dict[str, Any]], steps: list[tuple[str, float, int | None]]) -> Runtime:
    """Binding POSTs of one pod ("web"), each (pod, seconds until its answer, the upstream's status or None)."""
    clock = Clock()
    rt = runtime(tmp_path, profile(*rules, name="p", seed=1), clock=clock)
    if rules:
        rt.activations.activate("p")

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            addons = chain(rt)
            for pod, seconds, status in steps:
                await send(addons, binding(pod), clock, seconds, None if status is None else answer(status))
    asyncio.run(main())
    return rt


def test_a_pass_through_binding_commits_at_its_answer(tmp_path: Path) -> None:
    rt = scenario(tmp_path, [], [("web", 0.2, 201)])
    lat = rt.counters.bind_latency
    assert (lat.count, lat.sum, lat.waiting) == pytest.approx((1, 0.2, 0))


def test_retries_count_from_the_first_attempt(tmp_path: Path) -> None:
    # the apiserver refuses twice (a 500, then a 429), then commits: 1 + 2 + 0.5 s after the first POST
    rt = scenario(tmp_path, [], [("web", 1.0, 500), ("web", 2.0, 429), ("web", 0.5, 201)])
    lat = rt.counters.bind_latency
    assert (lat.count, lat.sum, lat.waiting) == pytest.approx((1, 3.5, 0))


def test_a_faults_own_answer_commits_nothing(tmp_path: Path) -> None:
    rules = [{"name": "fail", "match": BIND_MATCH, "when": {"maxInjections": 1},
              "fault": {"abort": {"status": 500}}}]
    rt = scenario(tmp_path, rules, [("web", 1.0, None), ("web", 1.0, 201)])
    lat = rt.counters.bind_latency
    assert (lat.count, lat.sum) == pytest.approx((1, 2.0)), "the second, forwarded, committed"


def test_commit_then_fail_commits_when_the_apiserver_answers(tmp_path: Path) -> None:
    rules = [{"name": "ctf", "match": BIND_MATCH, "when": {"maxInjections": 1},
              "fault": {"commitThenFail": {"abort": {"status": 500}}}}]
    rt = scenario(tmp_path, rules, [("web", 0.4, 201)])
    lat = rt.counters.bind_latency
    assert (lat.count, lat.sum) == pytest.approx((1, 0.4))
    assert rt.stats()["bindsTotal"]["failed"] == 1, "its client got the error"


def test_a_crash_points_hold_is_not_bind_latency(tmp_path: Path) -> None:
    rules = [{"name": "crash", "match": BIND_MATCH, "fault": {"crashPoint": {"holdSeconds": 0.05}}}]
    rt = scenario(tmp_path, rules, [("web", 0.3, 201)])
    lat = rt.counters.bind_latency
    assert (lat.count, lat.sum) == pytest.approx((1, 0.3))


def test_a_late_commit_ends_it(tmp_path: Path) -> None:
    clock = Clock()
    rules = [{"name": "late", "match": BIND_MATCH, "when": {"maxInjections": 1},
              "fault": {"failThenCommit": {"status": 504, "commitAfterSeconds": 0.01}}}]
    rt = runtime(tmp_path, profile(*rules, name="p", seed=1), clock=clock)
    rt.activations.activate("p")
    lat = rt.counters.bind_latency

    def apiserver(request: httpx.Request) -> httpx.Response:
        clock.now += 1.5  # the write commits 1.5 s after the client's first attempt
        return httpx.Response(201, json={"kind": "Status", "status": "Success", "code": 201})

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            late = LateCommits(rt.counters, lambda *a: None, lambda: httpx.AsyncClient(
                base_url="https://apiserver", transport=httpx.MockTransport(apiserver)), committed=lat.committed)
            await send(chain(rt, late), binding("web"), clock, 0.0, None)
            assert lat.waiting == 1 and lat.count == 0, "the client's 504 committed nothing"
            await asyncio.gather(*late.tasks)
            await late.done()

    asyncio.run(main())
    assert (lat.count, lat.sum, lat.waiting) == pytest.approx((1, 1.5, 0))


def test_other_requests_are_not_bindings(tmp_path: Path) -> None:
    clock = Clock()
    rt = runtime(tmp_path, clock=clock)

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            for f in (flow("POST", "/api/v1/namespaces/default/pods", b"{}"),
                      flow("PATCH", "/api/v1/namespaces/default/pods/web/status", b"{}"),
                      flow("GET", "/api/v1/namespaces/default/pods/web/binding")):
                await send(chain(rt), f, clock, 1.0, answer(200))

    asyncio.run(main())
    assert (rt.counters.bind_latency.count, rt.counters.bind_latency.waiting) == (0, 0)
