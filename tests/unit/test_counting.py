"""Connection counting (proxy.mitm.counting): mitmproxy's connection hooks feed ConnectionCounts."""

from __future__ import annotations

import pytest
from kube_fault_proxy.proxy.connections import ConnectionCounts
from kube_fault_proxy.proxy.mitm.counting import ConnectionCounter
from mitmproxy.proxy import server_hooks
from mitmproxy.test import tflow

# (case, the hooks in order, the counts as stats shows them)
CASES = [
    ("nothing yet", [], dict(clientAccepted=0, clientOpen=0, upstreamOpened=0, upstreamOpen=0, upstreamConnectFailed=0)),
    ("a client and its upstream", ["client_connected", "server_connected"],
     dict(clientAccepted=1, clientOpen=1, upstreamOpened=1, upstreamOpen=1, upstreamConnectFailed=0)),
    ("both closed", ["client_connected", "server_connected", "server_disconnected", "client_disconnected"],
     dict(clientAccepted=1, clientOpen=0, upstreamOpened=1, upstreamOpen=0, upstreamConnectFailed=0)),
    ("a failed connect", ["client_connected", "server_connect_error"],
     dict(clientAccepted=1, clientOpen=1, upstreamOpened=0, upstreamOpen=0, upstreamConnectFailed=1)),
    ("closes never go below zero", ["client_disconnected", "server_disconnected"],
     dict(clientAccepted=0, clientOpen=0, upstreamOpened=0, upstreamOpen=0, upstreamConnectFailed=0)),
]


@pytest.mark.parametrize(("hooks", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hooks_feed_the_counts(hooks: list[str], expected: dict[str, int]) -> None:
    counts = ConnectionCounts()
    counter = ConnectionCounter(counts)
    client = tflow.tclient_conn()
    data = server_hooks.ServerConnectionHookData(tflow.tserver_conn(), client)
    for hook in hooks:
        getattr(counter, hook)(client if hook.startswith("client") else data)
    assert counts.as_dict() == expected
