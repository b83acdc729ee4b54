"""Mirror upstream connection loss onto the client, so HTTP/2 clients never see sticky 502s."""

from __future__ import annotations

import asyncio
import logging

from mitmproxy.proxy import server_hooks

from kube_fault_proxy.proxy.mitm.held import HeldAnswers
from kube_fault_proxy.proxy.mitm.patches import internals
from kube_fault_proxy.proxy.runtime import Runtime

log = logging.getLogger(__name__)
DRAIN_SECONDS = 30.0  # a drained client's streams still open get this long to end before it is closed


class UpstreamLoss:
    """When an apiserver connection dies or cannot be made, close the client connection too.

    Without this, mitmproxy caches the failed upstream connection and answers every later
    request on the same HTTP/2 client connection with 502, even after the apiserver is back.

    A client that waits for answers the proxy already received and holds (a crash point, a delayed
    response) is drained instead: its held answers are relayed, then it is told HTTP/2 GOAWAY (no new
    streams) and closed once its streams still open have ended (at most DRAIN_SECONDS); only its streams
    that were waiting on the lost upstream fail (mitmproxy fails those itself). The GOAWAY comes after the
    held answers, not before: Python's h2 (httpx's, mitmproxy's own) ends every stream on any GOAWAY.
    """

    def __init__(self, runtime: Runtime, held: HeldAnswers) -> None:
        self.runtime = runtime
        self.held = held
        self._drains: set[asyncio.Task[None]] = set()

    def _close_client(self, data: server_hooks.ServerConnectionHookData, why: str) -> None:
        if not data.client.connected:
            return
        handler = internals.handler(internals.proxyserver(), data.client.id)
        if handler is None or not internals.carries(handler, data.client):
            return
        client = f"{data.client.peername[0]}:{data.client.peername[1]}"
        held = self.held.count(data.client.id)
        if not held:
            self.runtime.counters.note("upstream-lost", reason=why, client=client)
            internals.close(handler, data.client)
            return
        self.runtime.counters.note("upstream-lost", reason=why, client=client, heldAnswers=held)
        self.held.when_empty(data.client.id, lambda: self._drain(data.client.id, client))

    def _drain(self, client_id: str, client: str) -> None:
        """The last held answer was written: GOAWAY, then close once the client's open streams are done."""
        handler = internals.handler(internals.proxyserver(), client_id)
        if handler is None or not internals.carries(handler, internals.client_of(handler)):
            return
        goaway = internals.goaway(handler)
        task = asyncio.get_running_loop().create_task(self._close_when_quiet(handler, client, goaway))
        self._drains.add(task)  # a reference until it ends
        task.add_done_callback(self._drains.discard)

    async def _close_when_quiet(self, handler: internals.Handler, client: str, goaway: bool) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_SECONDS
        while (left := internals.open_streams(handler)) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        conn = internals.client_of(handler)
        if internals.carries(handler, conn):
            self.runtime.counters.note("upstream-lost-drained", client=client, goaway=goaway, streamsCut=left)
            internals.close(handler, conn)

    def server_disconnected(self, data: server_hooks.ServerConnectionHookData) -> None:
        self._close_client(data, "upstream connection closed")

    def server_connect_error(self, data: server_hooks.ServerConnectionHookData) -> None:
        self._close_client(data, f"upstream connect failed: {data.server.error}")
