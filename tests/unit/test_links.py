"""Upstream-loss propagation (proxy.mitm.links): a lost apiserver connection closes its client's too."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.proxy.mitm.held import HeldAnswers
from kube_fault_proxy.proxy.mitm.links import UpstreamLoss
from kube_fault_proxy.proxy.mitm.patches import internals
from mitmproxy.addons import proxyserver
from mitmproxy.connection import ConnectionState
from mitmproxy.proxy import server_hooks
from mitmproxy.test import taddons, tflow

from tests.support.mitm import events, live_handler, runtime, upstream_conn

# (hook, the upstream connection's error, the reason journaled)
LOSSES = [
    ("server_disconnected", None, "upstream connection closed"),
    ("server_connect_error", "connection refused", "upstream connect failed: connection refused"),
]


@pytest.mark.parametrize(("hook", "error", "reason"), LOSSES, ids=[h for h, _, _ in LOSSES])
def test_a_lost_upstream_closes_the_client_and_is_journaled(tmp_path: Path, hook: str, error: str | None,
                                                            reason: str) -> None:
    rt = runtime(tmp_path)

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            handler = live_handler(internals.proxyserver(), upstreams=1)
            server = upstream_conn()
            server.error = error
            getattr(UpstreamLoss(rt, HeldAnswers()), hook)(server_hooks.ServerConnectionHookData(server, handler.client))
            assert handler.client.state is ConnectionState.CLOSED
            assert handler.transports[handler.client].handler.cancelled
            [lost] = events(rt, "upstream-lost")
            assert (lost["reason"], lost["client"]) == (reason, "10.0.0.7:40001")

    asyncio.run(main())


def gone(handler: Any) -> None:
    del internals.proxyserver().connections[handler.client.id]


def not_carried(handler: Any) -> None:
    del handler.transports[handler.client]


def disconnected(handler: Any) -> None:
    handler.client.state = ConnectionState.CLOSED


@pytest.mark.parametrize("why", [gone, not_carried, disconnected])
def test_a_client_that_is_already_gone_is_left_alone(tmp_path: Path, why: Any) -> None:
    rt = runtime(tmp_path)

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            handler = live_handler(internals.proxyserver())
            task = handler.transports[handler.client].handler
            why(handler)
            UpstreamLoss(rt, HeldAnswers()).server_disconnected(server_hooks.ServerConnectionHookData(upstream_conn(), handler.client))
            assert not task.cancelled and events(rt, "upstream-lost") == []

    asyncio.run(main())


def test_a_client_the_proxy_never_saw_is_left_alone(tmp_path: Path) -> None:
    rt = runtime(tmp_path)

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            UpstreamLoss(rt, HeldAnswers()).server_disconnected(
                server_hooks.ServerConnectionHookData(upstream_conn(), tflow.tclient_conn()))
            assert events(rt, "upstream-lost") == []

    asyncio.run(main())


def test_a_client_waiting_for_held_answers_is_drained_then_closed(tmp_path: Path) -> None:
    """An answer the proxy already received and holds outlives the upstream connection: the client is
    closed only once the last held answer is relayed, and both moments are journaled."""
    rt = runtime(tmp_path)

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            handler = live_handler(internals.proxyserver(), upstreams=1)
            held = HeldAnswers()
            loss = UpstreamLoss(rt, held)
            with held.holding(handler.client.id), held.holding(handler.client.id):
                loss.server_disconnected(server_hooks.ServerConnectionHookData(upstream_conn(), handler.client))
                await asyncio.sleep(0)
                assert handler.client.state is not ConnectionState.CLOSED  # two answers still held
                [lost] = events(rt, "upstream-lost")
                assert lost["heldAnswers"] == 2
            assert handler.client.state is not ConnectionState.CLOSED  # closed after the answer is written
            for _ in range(3):
                await asyncio.sleep(0)
            assert handler.client.state is ConnectionState.CLOSED
            [drained] = events(rt, "upstream-lost-drained")
            assert drained == drained | {"client": "10.0.0.7:40001", "goaway": False, "streamsCut": 0}  # no HTTP/2
            assert held.count(handler.client.id) == 0
            await asyncio.sleep(0)
            assert not loss._drains  # the drain task is let go once it ends

    asyncio.run(main())
