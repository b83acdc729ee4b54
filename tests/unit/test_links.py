"""Upstream-loss propagation (proxy.mitm.links): a lost apiserver connection closes its client's too."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.proxy.mitm import internals
from kube_fault_proxy.proxy.mitm.links import UpstreamLoss
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
            getattr(UpstreamLoss(rt), hook)(server_hooks.ServerConnectionHookData(server, handler.client))
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
            UpstreamLoss(rt).server_disconnected(server_hooks.ServerConnectionHookData(upstream_conn(), handler.client))
            assert not task.cancelled and events(rt, "upstream-lost") == []

    asyncio.run(main())


def test_a_client_the_proxy_never_saw_is_left_alone(tmp_path: Path) -> None:
    rt = runtime(tmp_path)

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            UpstreamLoss(rt).server_disconnected(
                server_hooks.ServerConnectionHookData(upstream_conn(), tflow.tclient_conn()))
            assert events(rt, "upstream-lost") == []

    asyncio.run(main())
