"""Stalled client connections (`stallConnection`) as an addon of their own: silent both ways, PINGs included.

mitmproxy answers a client's HTTP/2 PING inside its HTTP/2 layer (hyper-h2 acknowledges it as it reads the frame),
so no hook can hold a PING back. The stall acts below mitmproxy instead, on the client's socket: the asyncio
transport's protocol is swapped for one that keeps what the client sends (mitmproxy reads nothing, so it answers
nothing), and the writer mitmproxy sends the client's bytes through is swapped for one that keeps them
(`patches/internals.swap_client_writer`). No library code changes: hyper-h2 and mitmproxy run as they ship, they
just hear nothing and their words wait. The apiserver side goes on (mitmproxy's own keep-alive PINGs upstream
too). When the window closes, or the activation ends, the connection heals: the kept bytes go out in order, the
client's are read. When the client closes the connection first (client-go's health check: no frame for
`ReadIdleTimeout`, then no PING answer for `PingTimeout`), the stall ends at once and what was kept is dropped.
Each stall's end is journaled (`stall-end`: reason, seconds, bytes kept each way).

A connection no stall was decided for costs one dictionary read in `request`: its bytes never meet this module.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from mitmproxy import http

from kube_fault_proxy.proxy.activations import Activations
from kube_fault_proxy.proxy.engine import Decision
from kube_fault_proxy.proxy.faults.plan import StallClient
from kube_fault_proxy.proxy.mitm.flow_keys import DECISION
from kube_fault_proxy.proxy.mitm.patches import internals

MAX_KEPT_BYTES = 256 * 2**20  # a stall that would keep more toward the client ends in a closed connection


class KeptWrites:
    """Stands in for the client's StreamWriter while its connection stalls: what mitmproxy sends is kept, in order."""

    def __init__(self, real: Any, over: Callable[[], None]) -> None:
        self.real, self.over = real, over
        self.kept: list[bytes] = []
        self.size = 0
        self.eof = False

    def write(self, data: bytes) -> None:
        self.kept.append(bytes(data))
        self.size += len(data)
        if self.size > MAX_KEPT_BYTES:
            self.over()

    def write_eof(self) -> None:
        self.eof = True

    def is_closing(self) -> bool:
        return bool(self.real.is_closing())

    async def drain(self) -> None:
        return None  # nothing is written: nothing to wait for

    def close(self) -> None:
        self.real.close()

    def __getattr__(self, name: str) -> Any:  # transport, get_extra_info, wait_closed: the real writer's
        return getattr(self.real, name)


class KeptReads(asyncio.Protocol):
    """Stands in for the client transport's protocol while the connection stalls: what the client sends is kept;
    its close ends the stall (and reaches mitmproxy's own protocol)."""

    def __init__(self, stall: ConnectionStall) -> None:
        self.stall = stall
        self.data = bytearray()

    def data_received(self, data: bytes) -> None:
        self.data += data

    def eof_received(self) -> bool | None:
        return self.stall.client_gone("client-closed", eof=True)

    def connection_lost(self, exc: Exception | None) -> None:
        self.stall.client_gone("connection-lost", lost=(exc,))

    def pause_writing(self) -> None:  # the transport's flow control is the real protocol's
        self.stall.original.pause_writing()

    def resume_writing(self) -> None:
        self.stall.original.resume_writing()


class ConnectionStall:
    """One client connection held silent: its transport's protocol and its writer swapped, until `end`."""

    def __init__(self, handler: Any, writer: Any, decision: Decision, seconds: float, note: Callable[..., None],
                 clock: Callable[[], float], forget: Callable[[str], None]) -> None:
        self.handler, self.writer, self.decision, self.note, self.clock = handler, writer, decision, note, clock
        self.client_id, self.forget = internals.client_of(handler).id, forget
        self.began = clock()
        self.transport = writer.transport
        self.original: Any = self.transport.get_protocol()
        self.reads = KeptReads(self)
        self.writes = KeptWrites(writer, self._too_much)
        self.done = False
        self.transport.set_protocol(self.reads)
        internals.swap_client_writer(handler, self.writes)
        self.timer = asyncio.get_running_loop().call_later(seconds, self.end, "window")

    def _too_much(self) -> None:
        asyncio.get_running_loop().call_soon(self.end, "too-much-kept")

    def _restore(self) -> None:
        self.done = True
        self.timer.cancel()
        self.forget(self.client_id)
        internals.swap_client_writer(self.handler, self.writer)
        if self.transport.get_protocol() is self.reads:
            self.transport.set_protocol(self.original)

    def _journal(self, reason: str) -> None:
        self.note("stall-end", **self.decision.stamp(), stall="connection", reason=reason,
                  stalledSeconds=round(self.clock() - self.began, 3), keptToClientBytes=self.writes.size,
                  keptFromClientBytes=len(self.reads.data))

    def end(self, reason: str) -> None:
        """The window closed or the activation ended: the connection heals (kept bytes sent, the client's read).
        Kept past MAX_KEPT_BYTES: it is closed instead."""
        if self.done:
            return
        self._restore()
        self._journal(reason)
        if reason == "too-much-kept":
            internals.close_client(self.handler)
            return
        if not self.writer.is_closing():
            for chunk in self.writes.kept:
                self.writer.write(chunk)
            if self.writes.eof:
                self.writer.write_eof()
        if self.reads.data:
            self.original.data_received(bytes(self.reads.data))

    def client_gone(self, reason: str, eof: bool = False,
                    lost: tuple[Exception | None] | None = None) -> bool | None:
        """The client closed the connection (or it was lost) during the stall: the stall ends, what was kept is
        dropped, and mitmproxy's protocol hears of the close."""
        if not self.done:
            self._restore()
            self._journal(reason)
        keep_open: bool | None = None
        if eof:
            keep_open = self.original.eof_received()
        if lost is not None:
            self.original.connection_lost(lost[0])
        return keep_open


class ConnectionStalls:
    """Holds silent the client connections a `stallConnection` rule decided; `note` journals (the counters' own)."""

    def __init__(self, note: Callable[..., None], activations: Activations,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.note, self.clock = note, clock
        self.live: dict[str, tuple[int, ConnectionStall]] = {}  # client connection id -> (epoch, its stall)
        activations.on_end.append(self._activation_over)

    def _activation_over(self, epoch: int) -> None:
        """Every stall of that activation heals now."""
        for of, stall in list(self.live.values()):
            if of == epoch:
                stall.end("deactivated")

    def request(self, flow: http.HTTPFlow) -> None:
        decision: Decision | None = flow.metadata.get(DECISION)
        if decision is None or not flow.live or flow.error:
            return
        step = next((s for s in decision.plan.before if isinstance(s, StallClient)), None)
        client_id = flow.client_conn.id
        if step is None or client_id in self.live:
            return
        handler = internals.handler(internals.proxyserver(), client_id)
        writer = None if handler is None else internals.client_writer(handler)
        if handler is None or writer is None or not hasattr(writer, "transport"):
            self.note("stall-end", **decision.stamp(), stall="connection", reason="no-connection",
                      stalledSeconds=0.0, keptToClientBytes=0, keptFromClientBytes=0)
            return
        stall = ConnectionStall(handler, writer, decision, step.seconds, self.note, self.clock, self._forget)
        self.live[client_id] = (decision.epoch, stall)

    def _forget(self, client_id: str) -> None:
        self.live.pop(client_id, None)
