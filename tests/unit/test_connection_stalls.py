"""The stalled connections' addon (proxy.mitm.connection_stalls), on stand-ins for a handler, its client's writer
and its socket's transport (no socket): bytes kept both ways, a heal that delivers them in order, a client close
that drops them and reaches mitmproxy's protocol, an activation's end, and a connection nothing decided left alone."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from kube_fault_proxy.proxy.engine import Decision
from kube_fault_proxy.proxy.faults.plan import Plan, StallClient
from kube_fault_proxy.proxy.mitm import connection_stalls, flow_keys
from kube_fault_proxy.proxy.mitm.patches import internals

from tests.support.mitm import flow

DECISION = Decision(profile="p", epoch=3, seed=7, rule="r", fault="stallConnection",
                    plan=Plan(before=(StallClient(30.0),)), match=1, injection=1)


class Transport:
    def __init__(self, protocol: Any) -> None:
        self.protocol = protocol
        self.aborted = False

    def get_protocol(self) -> Any:
        return self.protocol

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol

    def abort(self) -> None:
        self.aborted = True


class Writer:
    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.written: list[bytes] = []
        self.eof = self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def write_eof(self) -> None:
        self.eof = True

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


class Protocol:
    """mitmproxy's side of the socket (asyncio's StreamReaderProtocol)."""

    def __init__(self) -> None:
        self.heard: list[Any] = []

    def data_received(self, data: bytes) -> None:
        self.heard.append(data)

    def eof_received(self) -> bool:
        self.heard.append("eof")
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.heard.append("lost")

    def pause_writing(self) -> None:
        self.heard.append("pause")

    def resume_writing(self) -> None:
        self.heard.append("resume")


class Activations:
    def __init__(self) -> None:
        self.on_end: list[Callable[[int], None]] = []


def stalled(monkeypatch: pytest.MonkeyPatch, decision: Decision = DECISION) -> tuple[Any, ...]:
    """The addon after a stalled request on a connection of stand-ins: (addon, handler, writer, protocol, notes)."""
    protocol = Protocol()
    writer = Writer(Transport(protocol))
    f = flow("GET", "/api/v1/pods?watch=1")
    handler = SimpleNamespace(client=f.client_conn, transports={f.client_conn: SimpleNamespace(writer=writer)})
    monkeypatch.setattr(internals, "proxyserver", lambda: SimpleNamespace(connections={f.client_conn.id: handler}))
    closed: list[Any] = []
    monkeypatch.setattr(internals, "close_client", closed.append)
    notes: list[tuple[str, dict[str, Any]]] = []
    activations = Activations()
    addon = connection_stalls.ConnectionStalls(lambda event, **fields: notes.append((event, fields)),
                                               activations)  # type: ignore[arg-type]
    f.metadata[flow_keys.DECISION] = decision
    addon.request(f)
    return addon, handler, writer, protocol, notes, activations, closed


def test_a_stalled_connection_keeps_both_ways_then_heals_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        addon, handler, writer, protocol, notes, _, _ = stalled(monkeypatch)
        io = handler.transports[handler.client]
        assert isinstance(io.writer, connection_stalls.KeptWrites) and writer.transport.protocol is not protocol
        io.writer.write(b"ping-ack")
        io.writer.write(b"data")
        await io.writer.drain()  # returns at once: nothing is written
        writer.transport.protocol.data_received(b"ping")
        writer.transport.protocol.pause_writing()  # the transport's flow control still reaches mitmproxy's protocol
        assert writer.written == [] and protocol.heard == ["pause"]
        [(_, stall)] = addon.live.values()
        stall.end("window")
        assert writer.written == [b"ping-ack", b"data"] and protocol.heard == ["pause", b"ping"]
        assert io.writer is writer and writer.transport.protocol is protocol and addon.live == {}
        [(event, fields)] = notes
        assert event == "stall-end" and fields["reason"] == "window" and fields["rule"] == "r"
        assert (fields["keptToClientBytes"], fields["keptFromClientBytes"]) == (12, 4)
    asyncio.run(main())


def test_a_client_that_closes_ends_the_stall_at_once_and_what_was_kept_is_dropped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        addon, handler, writer, protocol, notes, _, _ = stalled(monkeypatch)
        handler.transports[handler.client].writer.write(b"answer")
        writer.transport.protocol.data_received(b"a request it gave up on")
        keep_open = writer.transport.protocol.eof_received()
        assert keep_open is True, "mitmproxy's protocol answers for the half-close"
        assert protocol.heard == ["eof"] and writer.written == [], "the close reaches mitmproxy; nothing kept does"
        assert addon.live == {} and [f["reason"] for _, f in notes] == ["client-closed"]
    asyncio.run(main())


def test_a_lost_connection_ends_the_stall_and_mitmproxy_hears_it(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        _, _, writer, protocol, notes, _, _ = stalled(monkeypatch)
        writer.transport.protocol.connection_lost(None)
        assert protocol.heard == ["lost"] and [f["reason"] for _, f in notes] == ["connection-lost"]
    asyncio.run(main())


def test_the_activations_end_heals_its_stalls(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        addon, handler, writer, _, notes, activations, _ = stalled(monkeypatch)
        handler.transports[handler.client].writer.write(b"x")
        activations.on_end[0](DECISION.epoch + 1)  # another activation's end: not this stall's
        assert addon.live and writer.written == []
        activations.on_end[0](DECISION.epoch)
        assert writer.written == [b"x"] and [f["reason"] for _, f in notes] == ["deactivated"]
    asyncio.run(main())


def test_too_much_kept_closes_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        monkeypatch.setattr(connection_stalls, "MAX_KEPT_BYTES", 4)
        _, handler, writer, _, notes, _, closed = stalled(monkeypatch)
        handler.transports[handler.client].writer.write(b"12345")
        await asyncio.sleep(0)
        assert closed == [handler] and writer.written == [] and [f["reason"] for _, f in notes] == ["too-much-kept"]
    asyncio.run(main())


def test_the_window_heals_on_the_loops_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        short = replace(DECISION, plan=Plan(before=(StallClient(0.05),)))
        addon, _, _, _, notes, _, _ = stalled(monkeypatch, short)
        await asyncio.sleep(0.1)
        assert addon.live == {} and [f["reason"] for _, f in notes] == ["window"]
    asyncio.run(main())


def test_a_request_nothing_stalls_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        plain = replace(DECISION, plan=Plan())
        addon, handler, writer, protocol, notes, _, _ = stalled(monkeypatch, plain)
        assert addon.live == {} and notes == []
        assert handler.transports[handler.client].writer is writer and writer.transport.protocol is protocol
    asyncio.run(main())
