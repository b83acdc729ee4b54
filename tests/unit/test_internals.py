"""mitmproxy's proxyserver internals the proxy relies on (proxy.mitm.internals): if an upgrade changes
any of them, these fail loudly, naming what moved. No socket: mitmproxy runs a connection on fake streams."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from types import SimpleNamespace
from typing import Any

import pytest
from hyperframe.frame import GoAwayFrame
from kube_fault_proxy.proxy.mitm.patches import internals, stream_counts
from mitmproxy import connection
from mitmproxy.addons import proxyserver
from mitmproxy.connection import ConnectionState
from mitmproxy.proxy import mode_servers, mode_specs, server
from mitmproxy.proxy.layers import http as http_layer
from mitmproxy.proxy.layers import tls
from mitmproxy.proxy.layers.http import _http2 as http2_module
from mitmproxy.proxy.layers.http._http2 import Http2Server
from mitmproxy.test import taddons

from tests.support.mitm import REVERSE, Writer, live_handler


def test_what_is_relied_on_is_still_there() -> None:
    """The names and shapes internals.py reaches: a rename or a new signature fails here first."""
    ps = proxyserver.Proxyserver()
    assert isinstance(ps.connections, dict), "Proxyserver.connections is no longer a dict"
    assert inspect.iscoroutinefunction(ps.servers.update), "Proxyserver.servers.update is no longer a coroutine"
    assert callable(ps.listen_addrs)
    assert list(inspect.signature(server.ConnectionHandler.close_connection).parameters) == [
        "self", "connection", "half_close"], "ConnectionHandler.close_connection changed its signature"
    assert {f.name for f in dataclasses.fields(server.ConnectionIO)} >= {"handler", "reader", "writer"}
    assert "register_connection(handler.layer.context.client.id" in inspect.getsource(
        mode_servers.ServerInstance.handle_stream), "connections are no longer registered by client id"
    with taddons.context(ps):
        instance = mode_servers.ServerInstance.make(mode_specs.ProxyMode.parse(REVERSE), ps)
        assert isinstance(instance, mode_servers.AsyncioServerInstance)
        assert instance._servers == [], "a listener instance keeps its asyncio servers elsewhere now"
    # goaway() and open_streams(): the client's HTTP/2 layer, its h2 connection and streams, the TLS layer's send
    assert "self.connections[self.context.client]" in inspect.getsource(http_layer.HttpLayer), \
        "HttpLayer no longer keeps the client's HTTP/2 layer in .connections"
    init = inspect.getsource(stream_counts.ORIGINALS["mitmproxy.proxy.layers.http._http2.Http2Connection.__init__"])
    assert "self.h2_conn = " in init and "self.streams = {}" in init, \
        "Http2Connection no longer keeps its h2 connection in .h2_conn and its streams in .streams"
    assert issubclass(Http2Server, http2_module.Http2Connection)
    assert inspect.isgeneratorfunction(tls.TLSLayer.send_data), "TLSLayer.send_data is no longer a command generator"
    assert "self.tls.sendall(data)" in inspect.getsource(tls.TLSLayer.send_data)
    assert GoAwayFrame(0, last_stream_id=7, error_code=0).serialize()[3] == 0x07, "hyperframe's GOAWAY changed"


def test_a_connection_mitmproxy_runs_is_found_by_client_id_and_closed_at_once() -> None:
    """mitmproxy accepts a connection on fake streams; the handler internals finds is the one that
    carries it, and closing its client aborts the socket and ends the connection."""
    seen: dict[str, Any] = {}

    class Probe:
        def client_connected(self, client: connection.Client) -> None:
            server_ = internals.proxyserver()
            handler = internals.handler(server_, client.id)
            seen.update(handler=handler, listed=internals.handlers(server_), ids=internals.client_ids(server_),
                        client=internals.client_of(handler), carried=internals.carries(handler, client))

        def client_disconnected(self, client: connection.Client) -> None:
            seen["state"] = client.state

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver(), Probe()) as tctx:
            tctx.options.update(connection_strategy="lazy")  # no upstream connection: no socket
            ps = internals.proxyserver()
            instance = mode_servers.ServerInstance.make(mode_specs.ProxyMode.parse(REVERSE), ps)
            writer = Writer()
            running = asyncio.create_task(instance.handle_stream(asyncio.StreamReader(), writer))  # type: ignore[arg-type]
            for _ in range(1000):
                await asyncio.sleep(0)
                if "handler" in seen and seen["handler"].transports[seen["handler"].client].handler:
                    break
            handler = seen["handler"]
            assert handler is not None, "the live connection is not in Proxyserver.connections by client id"
            assert seen["listed"] == [handler] and seen["ids"] == {handler.client.id}
            assert seen["client"] is handler.client and seen["carried"] is True
            assert internals.close_client(handler) is True
            await asyncio.wait_for(running, 5)
            assert writer.transport.aborted, "close_client did not abort the client's socket"
            assert seen["state"] is ConnectionState.CLOSED
            assert internals.handlers(ps) == [] and internals.handler(ps, handler.client.id) is None

    asyncio.run(main())


def test_upstream_connections_are_closed_or_aborted_and_the_client_is_spared() -> None:
    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            ps = internals.proxyserver()
            closed, aborted = live_handler(ps, upstreams=2), live_handler(ps, upstreams=2)
            internals.close_upstream(closed)
            ups = [(c, io) for c, io in closed.transports.items() if c is not closed.client]
            assert all(c.state is ConnectionState.CLOSED and io.handler.cancelled for c, io in ups)
            assert closed.client.state is ConnectionState.OPEN and not closed.transports[closed.client].handler.cancelled
            assert internals.abort_upstream(aborted) == 2
            ios = [io for c, io in aborted.transports.items() if c is not aborted.client]
            assert all(io.writer.transport.aborted for io in ios)
            assert not aborted.transports[aborted.client].writer.transport.aborted

    asyncio.run(main())


def test_a_client_without_a_transport_is_not_closed_twice() -> None:
    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            handler = live_handler(internals.proxyserver(), upstreams=0)
            del handler.transports[handler.client]
            assert internals.close_client(handler) is False
            assert internals.carries(handler, handler.client) is False

    asyncio.run(main())


def test_listeners_stop_and_their_sockets_are_listed() -> None:
    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            ps = internals.proxyserver()
            assert await internals.set_listeners(ps, []) is True
            assert list(internals.listening_sockets(ps)) == [] and ps.listen_addrs() == []

    asyncio.run(main())
    sock = SimpleNamespace(name="s")
    fake = SimpleNamespace(servers=[SimpleNamespace(_servers=[SimpleNamespace(sockets=(sock,))]), SimpleNamespace()])
    assert list(internals.listening_sockets(fake)) == [sock]


@pytest.mark.parametrize("spec", [REVERSE, "reverse:https://[::1]:6443@[::1]:7443"])
def test_the_mode_specs_the_outage_relistens_with_still_parse(spec: str) -> None:
    assert mode_specs.ProxyMode.parse(spec).full_spec == spec


def test_a_swapped_client_writer_is_what_mitmproxy_sends_through() -> None:
    """A stalled connection swaps the client's writer: mitmproxy's send paths (stock and the inline one) write
    through `transports[conn].writer`, asking `is_closing` first."""
    from kube_fault_proxy.proxy.mitm.patches import inline_hooks

    for source in (inspect.getsource(server.ConnectionHandler.server_event),
                   inspect.getsource(inline_hooks)):
        assert "self.transports[command.connection].writer" in source and "writer.write(" in source, \
            "a send path no longer writes through the client's ConnectionIO.writer"

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            ps = internals.proxyserver()
            handler = live_handler(ps)
            real = internals.client_writer(handler)
            kept = Writer()
            assert internals.swap_client_writer(handler, kept) is True
            assert handler.transports[handler.client].writer is kept and internals.client_writer(handler) is kept
            assert internals.swap_client_writer(handler, real) is True
            del handler.transports[handler.client]
            assert internals.client_writer(handler) is None and internals.swap_client_writer(handler, kept) is False

    asyncio.run(main())
