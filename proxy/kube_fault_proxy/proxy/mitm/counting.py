"""Count client and upstream connections as mitmproxy opens and closes them."""

from __future__ import annotations

from mitmproxy import connection
from mitmproxy.proxy import server_hooks

from kube_fault_proxy.proxy.connections import ConnectionCounts


class ConnectionCounter:
    """Feeds ConnectionCounts from mitmproxy's connection hooks (nothing per request)."""

    def __init__(self, counts: ConnectionCounts) -> None:
        self.counts = counts

    def client_connected(self, client: connection.Client) -> None:
        self.counts.client_connected()

    def client_disconnected(self, client: connection.Client) -> None:
        self.counts.client_disconnected()

    def server_connected(self, data: server_hooks.ServerConnectionHookData) -> None:
        self.counts.upstream_connected()

    def server_disconnected(self, data: server_hooks.ServerConnectionHookData) -> None:
        self.counts.upstream_disconnected()

    def server_connect_error(self, data: server_hooks.ServerConnectionHookData) -> None:
        self.counts.upstream_connect_failed()
