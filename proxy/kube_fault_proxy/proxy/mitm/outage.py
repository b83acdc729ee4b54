"""Apiserver outages without killing the apiserver: close, refuse and fail every connection."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from mitmproxy import connection, ctx, http
from mitmproxy.proxy import server_hooks

from kube_fault_proxy.proxy.engine import Decision
from kube_fault_proxy.proxy.faults.plan import StartOutage
from kube_fault_proxy.proxy.mitm import listen
from kube_fault_proxy.proxy.mitm.binds import BindOutcomes
from kube_fault_proxy.proxy.mitm.flow_keys import DECISION
from kube_fault_proxy.proxy.mitm.in_flight import WritesInFlight
from kube_fault_proxy.proxy.mitm.patches import internals
from kube_fault_proxy.proxy.runtime import Runtime

log = logging.getLogger(__name__)
REASON = "kube-fault-proxy: simulated apiserver outage"


class OutageState:
    """The outage going on, if any, which the two addons below share. At its start every live client connection is
    closed, and so is every upstream connection: requests the proxy had already forwarded die with the "apiserver"
    rather than being committed behind the scheduler's back (a kill -9 does not finish them either)."""

    def __init__(self, runtime: Runtime, binds: BindOutcomes | None = None,
                 in_flight: WritesInFlight | None = None) -> None:
        self.runtime = runtime
        self.binds = binds  # the Bindings in flight, failed as the outage begins
        self.in_flight = in_flight  # the writes forwarded and not yet answered, journaled as it begins
        self.until = 0.0
        self.mode = "close"
        self.counts: dict[str, int | str] = {}
        self._ended = asyncio.Event()
        self._listen: list[str] = []
        self._tasks: set[asyncio.Future[Any]] = set()
        self._closed_ids: set[str] = set()

    @property
    def active(self) -> bool:
        """Whether an outage is going on now."""
        return asyncio.get_running_loop().time() < self.until

    def start(self, seconds: float, mode: str, **cause: Any) -> bool:
        """Begin an outage; False (and nothing changes) when one is already going on."""
        if self.active:
            return False
        loop = asyncio.get_running_loop()
        self.until = loop.time() + seconds
        self.mode = mode
        self._ended = asyncio.Event()
        server = internals.proxyserver()
        handlers = internals.handlers(server)
        self.counts = {"clientConnectionsClosed": len(handlers), "newConnectionsRefused": 0,
                       "upstreamConnectsFailed": 0, "requestsDropped": 0}
        # Schedule the end first: nothing below may leave the proxy in an endless outage.
        loop.call_later(seconds, lambda: self._spawn(self._end()))
        # What the scheduler had been told of its binds when the apiserver "died".
        counters = self.runtime.counters
        cut = {"inFlight": self.in_flight.cut()} if self.in_flight is not None else {}
        counters.note("outage-start", seconds=seconds, refuse=mode, **cause,
                      clientConnectionsClosed=len(handlers), bindsSucceeded=counters.binds_succeeded,
                      bindsThrottled=counters.binds_throttled, bindsFailed=counters.binds_failed, **cut)
        aborted = 0
        for h in handlers:
            internals.close_client(h)  # first: the upstream losses below then close no client a second time
            aborted += internals.abort_upstream(h)
        self.counts["upstreamConnectionsAborted"] = aborted
        self._closed_ids = {internals.client_of(h).id for h in handlers}
        if mode == "refuse":
            self.counts["listener"] = "stopped"
            host, port = server.listen_addrs()[0][:2]
            spec = ctx.options.mode[0].rsplit("@", 1)[0]
            self._listen = [f"{spec}@{host}:{port}"]
            self._spawn(internals.set_listeners(server, []))
        if self.binds is not None:
            self.binds.fail_in_flight()  # every Binding in flight dies with the "apiserver"
        return True

    def drop_request(self) -> None:
        """Count a request that arrived during the outage."""
        self.counts["requestsDropped"] = int(self.counts["requestsDropped"]) + 1

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _end(self) -> None:
        server = internals.proxyserver()
        if self.mode == "refuse" and self._listen:
            await internals.set_listeners(server, self._listen)
            listen.widen(server)
        self.until = 0.0
        self._ended.set()
        # A connection closed at the start must be gone by now; one still here is a proxy bug.
        self.counts["clientConnectionsLingering"] = len(self._closed_ids & internals.client_ids(server))
        self.runtime.counters.note("outage-end", **self.counts)

    async def blackhole(self, client: connection.Client) -> None:
        """Hold a new client connection unanswered until the outage ends, then refuse it."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ended.wait(), max(0.0, self.until - asyncio.get_running_loop().time()))
        client.error = REASON


class OutageController:
    """Before the fault addon in the chain: while an outage lasts, new client connections are refused (close,
    refuse or blackhole), upstream connects fail, and a request read meanwhile is dropped."""

    def __init__(self, outage: OutageState) -> None:
        self.outage = outage

    def request(self, flow: http.HTTPFlow) -> None:
        """A request already read from a connection the outage is closing (a burst arrives in one read) must not
        reach the apiserver, as none would after a kill -9: counted and killed (before the fault addon sees it)."""
        if flow.live and flow.error is None and flow.response is None and self.outage.active:
            self.outage.drop_request()
            flow.kill()

    def client_connected(self, client: connection.Client) -> Any:
        outage = self.outage
        if not outage.active:
            return None
        outage.counts["newConnectionsRefused"] = int(outage.counts["newConnectionsRefused"]) + 1
        if outage.mode == "blackhole":
            return outage.blackhole(client)
        client.error = REASON
        return None

    def server_connect(self, data: server_hooks.ServerConnectionHookData) -> None:
        outage = self.outage
        if outage.active:
            outage.counts["upstreamConnectsFailed"] = int(outage.counts["upstreamConnectsFailed"]) + 1
            data.server.error = REASON


class OutageStarts:
    """Right after the fault addon in the chain: begins the outage a fault decided (`StartOutage`, read from the
    decision in `flow.metadata`) and kills the request that asked for it, in the same `request` hook, before
    anything else is read on any connection (the rest of a burst already read meets the outage at
    `OutageController`, as it would meet a dead apiserver)."""

    def __init__(self, outage: OutageState) -> None:
        self.outage = outage

    def request(self, flow: http.HTTPFlow) -> None:
        decision: Decision | None = flow.metadata.get(DECISION)
        if decision is None or not flow.live:
            return
        for step in decision.plan.before:
            if isinstance(step, StartOutage):
                self.outage.start(step.seconds, step.refuse, **decision.stamp())  # every Binding in flight dies
                flow.kill()  # with the apiserver, and so does this request
                return
