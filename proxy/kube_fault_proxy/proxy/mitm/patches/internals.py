"""Every touch of mitmproxy's proxyserver internals, beyond its addon API, in one place.

mitmproxy has no public API to close or abort a live connection, to find the handler that carries a
client connection, or to start and stop listeners at runtime: the outage, the upstream-loss
propagation, the connection timeouts, the upstream-closing faults and the server's own stop reach
`Proxyserver.connections` (client id → `ProxyConnectionHandler`), a handler's `client`,
`transports` (connection → `ConnectionIO` with its `writer`) and `close_connection`,
`Proxyserver.servers.update` and a listener instance's `_servers` (asyncio servers), the writer a stalled
connection sends through (`ConnectionIO.writer`, swapped for one that holds), and the hyper-h2
connection of a client's HTTP/2 layer (whose own `update_settings` raises its stream limit on stock mitmproxy).
Pinned to mitmproxy 12.3; `tests/unit/test_internals.py` fails loudly if an upgrade changes any of them.
(The library changes keep their own overrides and gates: `stream_limit.py`, `dispatch.py` and the others.)

No gate: it is a read with no replacement. It changes no library code, so there is nothing to skip; where an
upgrade moved what it reads, its test fails before a release, and a read that finds nothing answers "none".
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from hyperframe.frame import GoAwayFrame
from mitmproxy import connection, ctx
from mitmproxy.proxy import mode_specs
from mitmproxy.proxy.layers import tls
from mitmproxy.proxy.layers.http._http2 import Http2Server

# mitmproxy's own classes, loosely typed: its API is only partly annotated.
Handler = Any  # mitmproxy.proxy.mode_servers.ProxyConnectionHandler
Proxyserver = Any  # mitmproxy.addons.proxyserver.Proxyserver


def proxyserver() -> Proxyserver:
    """The running master's proxyserver addon."""
    return ctx.master.addons.get("proxyserver")


def handlers(server: Proxyserver) -> list[Handler]:
    """The handlers of every live client connection, at this instant."""
    return list(server.connections.values())


def handler(server: Proxyserver, client_id: str) -> Handler | None:
    """The handler of one client connection, if it is still live."""
    return server.connections.get(client_id)


def client_ids(server: Proxyserver) -> set[str]:
    """The ids of every live client connection."""
    return set(server.connections)


def client_of(h: Handler) -> connection.Client:
    """A handler's client connection."""
    client: connection.Client = h.client
    return client


def carries(h: Handler, conn: connection.Connection) -> bool:
    """Whether the handler still has a transport for this connection."""
    return conn in h.transports


def close(h: Handler, conn: connection.Connection) -> None:
    """Close one of a handler's connections the way mitmproxy does (its layers clean up)."""
    h.close_connection(conn)


def _layers(h: Handler) -> Iterator[Any]:
    """A handler's layer stack, outermost first (NextLayer's `layer`, a tunnel's `child_layer`)."""
    layer, depth = h.layer, 0
    while layer is not None and depth < 32:
        yield layer
        layer, depth = getattr(layer, "layer", None) or getattr(layer, "child_layer", None), depth + 1


def _client_http2(h: Handler) -> tuple[Any, Any] | None:
    """The client connection's HTTP/2 layer and the TLS layer under it, if it speaks HTTP/2 over TLS."""
    client, tls_layer = h.client, None
    for layer in _layers(h):
        if isinstance(layer, tls.ClientTLSLayer) and layer.conn is client:
            tls_layer = layer
        connections = getattr(layer, "connections", None)
        if isinstance(connections, dict) and isinstance(connections.get(client), Http2Server):
            return (connections[client], tls_layer) if tls_layer is not None else None
    return None


def client_h2(h: Handler) -> Any | None:
    """The hyper-h2 connection of the client's HTTP/2 layer (None for a client without HTTP/2)."""
    for layer in _layers(h):
        connections = getattr(layer, "connections", None)
        if isinstance(connections, dict) and isinstance(connections.get(h.client), Http2Server):
            return connections[h.client].h2_conn
    return None


def goaway(h: Handler) -> bool:
    """Send the client an HTTP/2 GOAWAY (NO_ERROR, last stream = the highest it opened): it opens no new
    stream on this connection, as when an apiserver shuts down. mitmproxy has no command for it: the frame
    is written by hyperframe, behind h2's back (h2 refuses to send anything after its own GOAWAY), and
    encrypted by the client's TLS layer the way its `send_data` does. False for a client that does not
    speak HTTP/2 over TLS, or whose connection is closing."""
    layers, io = _client_http2(h), h.transports.get(h.client)
    if layers is None or io is None or io.writer is None or io.writer.is_closing():
        return False
    http2, tls_layer = layers
    frame = GoAwayFrame(0, last_stream_id=http2.h2_conn.highest_inbound_stream_id, error_code=0)
    for command in tls_layer.send_data(frame.serialize()):
        io.writer.write(command.data)
    return True


def open_streams(h: Handler) -> int:
    """How many HTTP/2 streams of the client's are still open (0 for a client without HTTP/2)."""
    layers = _client_http2(h)
    return 0 if layers is None else len(layers[0].streams)


def close_client(h: Handler) -> bool:
    """Close a handler's client connection at once, as a crashed apiserver's kernel would.

    mitmproxy is told (so its layers clean up), and the socket itself is aborted: mitmproxy's own
    close can wait behind a busy handler, and a client that sees no FIN keeps its requests in
    flight until its HTTP/2 health check gives up (client-go: 30 s idle + 15 s ping).
    """
    io = h.transports.get(h.client)
    if io is None:
        return False
    h.close_connection(h.client)
    if io.writer is not None:
        io.writer.transport.abort()
    return True


def client_writer(h: Handler) -> Any | None:
    """The writer mitmproxy sends the client's bytes through (an asyncio StreamWriter), if the connection is live."""
    io = h.transports.get(h.client)
    return None if io is None else io.writer


def swap_client_writer(h: Handler, writer: Any) -> bool:
    """Have mitmproxy send the client's bytes through `writer` from now on (its send paths, stock and changed, all
    write through the client's `ConnectionIO.writer`: `is_closing`, `write`, `write_eof`, `drain`, `close`);
    False if the connection is gone."""
    io = h.transports.get(h.client)
    if io is None or io.writer is None:
        return False
    io.writer = writer
    return True


def abort_upstream(h: Handler) -> int:
    """Abort a handler's upstream connections, as a crashed apiserver's would be: the apiserver
    cancels the requests they carry that it has not yet committed, and no answer of theirs is
    counted as given. Returns how many were aborted."""
    aborted = 0
    for conn, io in list(h.transports.items()):
        if conn is h.client or io.writer is None:
            continue
        io.writer.transport.abort()
        aborted += 1
    return aborted


def close_upstream(h: Handler) -> None:
    """Close a handler's open upstream connections the way mitmproxy does: every stream on them fails."""
    for conn in list(h.transports):
        if isinstance(conn, connection.Server) and conn.connected:
            h.close_connection(conn)


def close_client_upstream(client_id: str) -> None:
    """Close the apiserver connection(s) of a client connection, if it is still there (`close_upstream`)."""
    h = handler(proxyserver(), client_id)
    if h is not None:
        close_upstream(h)


async def set_listeners(server: Proxyserver, specs: Iterable[str]) -> bool:
    """Listen on exactly these modes (none: stop listening); live connections are kept."""
    return bool(await server.servers.update([mode_specs.ProxyMode.parse(s) for s in specs]))


def listening_sockets(server: Proxyserver) -> Iterator[Any]:
    """Every socket the proxyserver's listeners listen on (asyncio's TransportSocket)."""
    for instance in list(server.servers):
        for listener in getattr(instance, "_servers", []):
            yield from getattr(listener, "sockets", ())
