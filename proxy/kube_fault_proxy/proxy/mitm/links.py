"""Mirror upstream connection loss onto the client, so HTTP/2 clients never see sticky 502s."""

from __future__ import annotations

import logging

from mitmproxy.proxy import server_hooks

from kube_fault_proxy.proxy.mitm import internals
from kube_fault_proxy.proxy.runtime import Runtime

log = logging.getLogger(__name__)


class UpstreamLoss:
    """When an apiserver connection dies or cannot be made, close the client connection too.

    Without this, mitmproxy caches the failed upstream connection and answers every later
    request on the same HTTP/2 client connection with 502, even after the apiserver is back.
    """

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def _close_client(self, data: server_hooks.ServerConnectionHookData, why: str) -> None:
        if not data.client.connected:
            return
        handler = internals.handler(internals.proxyserver(), data.client.id)
        if handler is None or not internals.carries(handler, data.client):
            return
        self.runtime.note(
            "upstream-lost", reason=why, client=f"{data.client.peername[0]}:{data.client.peername[1]}"
        )
        internals.close(handler, data.client)

    def server_disconnected(self, data: server_hooks.ServerConnectionHookData) -> None:
        self._close_client(data, "upstream connection closed")

    def server_connect_error(self, data: server_hooks.ServerConnectionHookData) -> None:
        self._close_client(data, f"upstream connect failed: {data.server.error}")
