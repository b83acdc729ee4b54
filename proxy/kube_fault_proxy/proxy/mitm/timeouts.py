"""Close client connections the way kube-apiserver's HTTP server does: ReadHeaderTimeout, IdleTimeout.

kube-apiserver (k8s.io/apiserver secure_serving.go) runs Go's server with ReadHeaderTimeout 32 s
and IdleTimeout 90 s. mitmproxy only has an inactivity timeout (tcp_timeout), which a client that
trickles one header byte a second keeps alive forever. Here a connection that has not finished a
request's headers within the read-header timeout of being accepted, or that has had no request
open for the idle timeout, is closed. A client's trickled second request on a kept-alive HTTP/1
connection counts as idle (mitmproxy reports no partial headers): it goes after the idle timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from mitmproxy import connection, http

from kube_fault_proxy.proxy.mitm.patches import internals
from kube_fault_proxy.proxy.runtime import Runtime


@dataclass(slots=True)
class _Conn:
    accepted: float
    last: float
    open: int = 0
    requests: int = 0
    open_ids: set[str] = field(default_factory=set)  # the open requests reported by id


class ConnectionTimeouts:
    """Per client connection: when accepted, when last active, requests open.

    An addon of its own: each request's start (its headers) and end (an answer or an error) by request id, so a
    request reported twice, or ended without a start, counts once or not at all. It comes before the fault
    addon in the chain: a request ends for it when the apiserver's answer arrives, as before a fault holds it.
    (With the lean dispatch, `patches/dispatch.py`, an addon costs a hook only a call of its own.)
    """

    def __init__(self, runtime: Runtime, read_header_seconds: float, idle_seconds: float,
                 clock: Any = time.monotonic) -> None:
        self.runtime = runtime
        self.read_header = read_header_seconds
        self.idle = idle_seconds
        self.clock = clock
        self.conns: dict[str, _Conn] = {}
        self._task: asyncio.Task[None] | None = None

    def running(self) -> None:
        if self.read_header > 0 or self.idle > 0:
            self._task = asyncio.get_running_loop().create_task(self._sweep(), name="connection timeouts")

    def done(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def client_connected(self, client: connection.Client) -> None:
        now = self.clock()
        self.conns[client.id] = _Conn(now, now)

    def client_disconnected(self, client: connection.Client) -> None:
        self.conns.pop(client.id, None)

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        self.request_started(flow.client_conn.id, flow.id)

    def response(self, flow: http.HTTPFlow) -> None:
        self.request_ended(flow.client_conn.id, flow.id)

    def error(self, flow: http.HTTPFlow) -> None:
        self.request_ended(flow.client_conn.id, flow.id)

    def request_started(self, client_id: str, request_id: str | None = None) -> None:
        """A request's headers arrived on this connection (without an id: the caller reports it once)."""
        c = self.conns.get(client_id)
        if c is None:
            return
        if request_id is not None:
            if request_id in c.open_ids:
                return
            c.open_ids.add(request_id)
        c.open += 1
        c.requests += 1
        c.last = self.clock()

    def request_ended(self, client_id: str, request_id: str | None = None) -> None:
        """That request was answered, failed or reset (without an id: the caller reports it once)."""
        c = self.conns.get(client_id)
        if c is None:
            return
        if request_id is not None:
            if request_id not in c.open_ids:
                return
            c.open_ids.remove(request_id)
        c.open = max(0, c.open - 1)
        c.last = self.clock()

    def expired(self, now: float) -> list[tuple[str, str]]:
        """Connections to close now, and why."""
        out = []
        for cid, c in self.conns.items():
            if c.open:
                continue
            if c.requests == 0 and self.read_header > 0 and now - c.accepted >= self.read_header:
                out.append((cid, f"no complete request within {self.read_header:g}s (read-header timeout)"))
            elif c.requests and self.idle > 0 and now - c.last >= self.idle:
                out.append((cid, f"idle for {self.idle:g}s (idle timeout)"))
        return out

    async def _sweep(self) -> None:
        period = max(0.1, min(t for t in (self.read_header, self.idle) if t > 0) / 8)
        while True:
            await asyncio.sleep(period)
            server = internals.proxyserver()
            for cid, why in self.expired(self.clock()):
                self.conns.pop(cid, None)
                handler = internals.handler(server, cid)
                if handler is None:
                    continue
                client = internals.client_of(handler)
                self.runtime.counters.note("client-timeout", reason=why,
                                  client=f"{client.peername[0]}:{client.peername[1]}" if client.peername else "")
                with contextlib.suppress(Exception):
                    internals.close(handler, client)
