"""outage (proxy.faults.outage): its plan, and the outage itself (proxy.mitm.outage) on real connection handlers
with fake streams: what closes at the start, what is refused meanwhile, how it ends and what is journaled."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.proxy.faults.plan import Plan, StartOutage
from kube_fault_proxy.proxy.mitm.flow_keys import DECISION
from kube_fault_proxy.proxy.mitm.outage import REASON, OutageController, OutageStarts, OutageState
from kube_fault_proxy.proxy.mitm.patches import internals
from kube_fault_proxy.proxy.runtime import Runtime
from mitmproxy.addons import proxyserver
from mitmproxy.connection import ConnectionState
from mitmproxy.proxy import server_hooks
from mitmproxy.test import taddons, tflow

from tests.support.builders import bind
from tests.support.mitm import REVERSE, events, live_handler, runtime, upstream_conn


def run(tmp_path: Path, test: Callable[[OutageState, Runtime, Any], Awaitable[None]]) -> None:
    rt = runtime(tmp_path)

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()) as tctx:
            tctx.options.update(mode=[REVERSE])
            await test(OutageState(rt), rt, internals.proxyserver())

    asyncio.run(main())


def test_the_start_closes_every_client_and_aborts_every_upstream_connection(tmp_path: Path) -> None:
    async def test(outage: OutageState, rt: Runtime, ps: Any) -> None:
        handlers = [live_handler(ps, upstreams=2), live_handler(ps, upstreams=1)]
        rt.counters.bind_outcome(201)
        rt.counters.bind_outcome(429, "1")
        assert outage.start(30, "close", rule="r") is True and outage.active
        for h in handlers:
            assert h.client.state is ConnectionState.CLOSED and h.transports[h.client].writer.transport.aborted
            assert all(io.writer.transport.aborted for c, io in h.transports.items() if c is not h.client)
        assert outage.counts == {"clientConnectionsClosed": 2, "newConnectionsRefused": 0, "upstreamConnectsFailed": 0,
                                 "requestsDropped": 0, "upstreamConnectionsAborted": 3}
        [start] = events(rt, "outage-start")
        assert {k: start[k] for k in ("seconds", "refuse", "rule", "clientConnectionsClosed", "bindsSucceeded",
                                      "bindsThrottled", "bindsFailed")} == {
            "seconds": 30, "refuse": "close", "rule": "r", "clientConnectionsClosed": 2, "bindsSucceeded": 1,
            "bindsThrottled": 1, "bindsFailed": 0}
        assert outage.start(5, "close") is False, "one outage at a time"
        assert len(events(rt, "outage-start")) == 1

    run(tmp_path, test)


@pytest.mark.parametrize("mode", ["close", "refuse", "blackhole"])
def test_new_connections_and_upstream_connects_fail_while_it_lasts(tmp_path: Path, mode: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    listeners: list[list[str]] = []

    async def set_listeners(server: Any, specs: Any) -> bool:
        listeners.append(list(specs))
        return True

    monkeypatch.setattr(internals, "set_listeners", set_listeners)

    async def test(outage: OutageState, rt: Runtime, ps: Any) -> None:
        monkeypatch.setattr(ps, "listen_addrs", lambda: [("127.0.0.1", 7443)])
        outage.start(0.2, mode)
        gate = OutageController(outage)
        client = tflow.tclient_conn()
        waiting = gate.client_connected(client)
        data = server_hooks.ServerConnectionHookData(upstream_conn(), tflow.tclient_conn())
        gate.server_connect(data)
        assert data.server.error == REASON
        outage.drop_request()
        if mode == "blackhole":
            assert waiting is not None and client.error is None, "held, unanswered until the outage ends"
            await waiting
        else:
            assert waiting is None
        assert client.error == REASON
        await asyncio.sleep(0.3)
        assert not outage.active
        later = tflow.tclient_conn()
        assert gate.client_connected(later) is None and later.error is None, "over: connections are served again"
        [end] = events(rt, "outage-end")
        assert (end["newConnectionsRefused"], end["upstreamConnectsFailed"], end["requestsDropped"]) == (1, 1, 1)
        assert end["clientConnectionsLingering"] == 0
        if mode == "refuse":
            assert listeners == [[], ["reverse:https://127.0.0.1:6443@127.0.0.1:7443"]], "stopped, then back on its port"
            assert end["listener"] == "stopped"
        else:
            assert listeners == []

    run(tmp_path, test)


def test_a_connection_still_there_at_the_end_is_reported_as_lingering(tmp_path: Path) -> None:
    async def test(outage: OutageState, rt: Runtime, ps: Any) -> None:
        stays, goes = live_handler(ps), live_handler(ps)
        outage.start(0.05, "close")
        del ps.connections[goes.client.id]  # mitmproxy unregisters a connection once it has closed
        await asyncio.sleep(0.15)
        [end] = events(rt, "outage-end")
        assert end["clientConnectionsClosed"] == 2 and end["clientConnectionsLingering"] == 1
        assert stays.client.id in ps.connections

    run(tmp_path, test)


def test_an_outage_plans_its_start_and_forwards_nothing() -> None:
    from kube_fault_proxy.proxy.faults import Outage
    from kube_fault_proxy.proxy.faults.plan import StartOutage

    plan = Outage(seconds=10).plan(bind("p"), random.Random(0))
    assert plan.before == (StartOutage(10, "close"),) and not plan.forwards
    assert plan.describe() == "outage 10s (close new connections)"


class Decided:
    """What the outage's starter reads of a decision: its plan and its stamp."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def stamp(self) -> dict[str, Any]:
        return {"rule": "down", "epoch": 3}


def test_it_begins_in_the_request_hook_of_the_flow_a_fault_decided_it_for_and_of_no_other(tmp_path: Path) -> None:
    """The fault addon decides an outage and stamps the decision in `flow.metadata`; the outage's own addon, next
    in the chain, begins it and kills the request in the same `request` hook (no other addon calls it)."""
    async def test(outage: OutageState, rt: Runtime, ps: Any) -> None:
        handler = live_handler(ps, upstreams=1)
        starts = OutageStarts(outage)
        plain, other = tflow.tflow(), tflow.tflow()
        other.metadata[DECISION] = Decided(Plan(before=()))
        starts.request(plain)
        starts.request(other)
        assert not outage.active and events(rt, "outage-start") == [] and plain.live and other.live
        asked = tflow.tflow()
        asked.metadata[DECISION] = Decided(Plan(before=(StartOutage(2.0, "blackhole"),)))
        starts.request(asked)
        assert outage.active and outage.mode == "blackhole" and asked.error is not None and not asked.live
        assert handler.client.state is ConnectionState.CLOSED
        [start] = events(rt, "outage-start")
        assert (start["seconds"], start["refuse"], start["rule"], start["epoch"]) == (2.0, "blackhole", "down", 3)
        starts.request(asked)
        assert len(events(rt, "outage-start")) == 1, "a killed request begins nothing more"
        burst = tflow.tflow()
        OutageController(outage).request(burst)
        assert burst.error is not None and outage.counts["requestsDropped"] == 1, "the rest of a burst is dropped"

    run(tmp_path, test)
