"""The HTTP/2 stream changes: the advertised limit (stream_limit), O(1) counting and bounded tables
(stream_counts), the upstream queue drained in a loop (stream_queue); and the limit on stock mitmproxy through
hyper-h2's own settings (proxy.mitm.stream_settings)."""

from __future__ import annotations

import hashlib
import inspect
import random
from collections.abc import Iterator

import h2.config
import h2.connection
import h2.events
import h2.settings
import h2.stream
import hyperframe.frame
import pytest
from kube_fault_proxy.proxy.mitm import patches
from kube_fault_proxy.proxy.mitm.patches import stream_counts, stream_limit, stream_queue
from mitmproxy import http
from mitmproxy.addons import proxyserver
from mitmproxy.proxy import commands, events
from mitmproxy.proxy.context import Context
from mitmproxy.proxy.layers.http import _http2
from mitmproxy.proxy.layers.http._base import ReceiveHttp
from mitmproxy.proxy.layers.http._events import (
    ErrorCode,
    RequestEndOfMessage,
    RequestHeaders,
    ResponseData,
    ResponseEndOfMessage,
    ResponseHeaders,
    ResponseProtocolError,
)
from mitmproxy.test import taddons, tflow

MAX_CONCURRENT_STREAMS = h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS


@pytest.fixture(autouse=True)
def installed() -> Iterator[None]:
    for change in (stream_limit, stream_counts, stream_queue):
        change.install()
    yield
    for change in (stream_limit, stream_counts, stream_queue):
        change.install()


def first_settings() -> dict[int, int]:
    """The SETTINGS frame mitmproxy's client-facing HTTP/2 layer sends first, parsed."""
    with taddons.context(proxyserver.Proxyserver()) as tctx:
        ctx = Context(tflow.tclient_conn(), tctx.options)
        ctx.client.alpn = b"h2"
        layer = _http2.Http2Server(ctx)
        data = b"".join(c.data for c in layer.handle_event(events.Start()) if isinstance(c, commands.SendData))
    frame, length = hyperframe.frame.Frame.parse_frame_header(memoryview(data[:9]))
    frame.parse_body(memoryview(data[9:9 + length]))
    assert isinstance(frame, hyperframe.frame.SettingsFrame), f"first frame is {type(frame).__name__}"
    return dict(frame.settings)


@pytest.mark.parametrize("limit", [4096, 100, 1, stream_limit.MAX])
def test_the_first_settings_frame_advertises_the_limit(limit: int) -> None:
    stream_limit.install(limit)
    assert first_settings()[MAX_CONCURRENT_STREAMS] == limit


def test_mitmproxy_still_keeps_its_own_window_settings() -> None:
    sent = first_settings()
    assert sent[h2.settings.SettingCodes.INITIAL_WINDOW_SIZE] == 2**31 - 1
    assert sent[h2.settings.SettingCodes.MAX_FRAME_SIZE] == 2**17


@pytest.mark.parametrize("bad", [0, -1, 2**31])
def test_a_limit_out_of_range_is_refused(bad: int) -> None:
    with pytest.raises(ValueError, match="between 1 and"):
        stream_limit.install(bad)


def test_the_overrides_are_in_place() -> None:
    """If a mitmproxy or hyper-h2 upgrade renames what is patched, this fails loudly."""
    assert h2.connection.H2Connection._open_streams is stream_counts._counted_open_streams
    assert h2.connection.H2Connection._begin_new_stream is stream_counts._counted_begin_new_stream
    assert h2.stream.H2StreamStateMachine.process_input is stream_counts._counted_process_input
    assert _http2.Http2Server.__init__ is stream_limit._init_server
    assert _http2.Http2Client._handle_event is stream_queue._client_handle_event


def _pair() -> tuple[h2.connection.H2Connection, h2.connection.H2Connection]:
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    server.local_settings.max_concurrent_streams = 10_000
    server.local_settings.acknowledge()
    client.initiate_connection()
    server.initiate_connection()
    _pump(client, server)
    return client, server


def _pump(a: h2.connection.H2Connection, b: h2.connection.H2Connection) -> None:
    while True:
        ab, ba = a.data_to_send(), b.data_to_send()
        if not ab and not ba:
            return
        if ab:
            b.receive_data(ab)
        if ba:
            a.receive_data(ba)


def _walked(conn: h2.connection.H2Connection, parity: int) -> int:
    return sum(1 for sid, s in conn.streams.items() if s.open and sid % 2 == parity)


def test_counts_match_hyper_h2s_own_walk_through_every_way_a_stream_ends() -> None:
    client, server = _pair()
    rng = random.Random(3355)
    live: list[int] = []
    headers = [(":method", "POST"), (":path", "/b"), (":scheme", "https"), (":authority", "x")]
    for _ in range(3000):
        op = rng.random()
        if op < 0.5 or not live:
            sid = client.get_next_available_stream_id()
            client.send_headers(sid, headers, end_stream=rng.random() < 0.5)
            live.append(sid)
        else:
            sid = live.pop(rng.randrange(len(live)))
            end = rng.choice(["server-ends", "client-resets", "server-resets", "client-ends"])
            with_stream = server.streams.get(sid)
            if with_stream is None or with_stream.closed:
                continue
            if end == "server-ends":
                server.send_headers(sid, [(":status", "201")], end_stream=True)
            elif end == "client-resets":
                client.reset_stream(sid)
            elif end == "server-resets":
                server.reset_stream(sid)
            elif client.streams[sid].open and not client.streams[sid].state_machine.state.name.endswith("LOCAL"):
                client.end_stream(sid)
        _pump(client, server)
        assert client.open_outbound_streams == _walked(client, 1)
        assert server.open_inbound_streams == _walked(server, 1)
        assert client.open_inbound_streams == 0 == server.open_outbound_streams
    assert server.open_inbound_streams > 100, "the walk must have covered many concurrent streams"


def test_closed_streams_are_still_dropped_from_the_table() -> None:
    client, server = _pair()
    headers = [(":method", "GET"), (":path", "/"), (":scheme", "https"), (":authority", "x")]
    for _ in range(2000):
        sid = client.get_next_available_stream_id()
        client.send_headers(sid, headers, end_stream=True)
        _pump(client, server)
        server.send_headers(sid, [(":status", "200")], end_stream=True)
        _pump(client, server)
        assert server.open_inbound_streams == 0
    assert len(server.streams) <= stream_counts.PRUNE_SLACK + 1
    assert len(client.streams) <= stream_counts.PRUNE_SLACK + 1


def test_what_finished_streams_leave_behind_is_patched_too() -> None:
    """If a mitmproxy upgrade renames the connection layer's init, this fails loudly."""
    assert _http2.Http2Connection.__init__ is stream_counts._init_connection


# sha256 (first 16 hex digits) of hyper-h2 4.x's walk, which stream_counts._drop_closed reproduces without its count.
OPEN_STREAMS_SHA = "28d9501144f0cee7"


def test_the_reproduced_walk_is_still_hyper_h2s() -> None:
    source = inspect.getsource(stream_counts._open_streams)
    assert hashlib.sha256(source.encode()).hexdigest()[:16] == OPEN_STREAMS_SHA, (
        "hyper-h2 changed H2Connection._open_streams: check stream_counts._drop_closed against it")


BINDING = [(":method", "POST"), (":path", "/api/v1/namespaces/d/pods/p/binding"), (":scheme", "https"),
           (":authority", "x")]


class _Client:
    """An h2 client speaking to mitmproxy's client-facing HTTP/2 layer, which answers each request."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.layer = _http2.Http2Server(ctx)
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()
        self._to_client(self.layer.handle_event(events.Start()))
        self.send()

    def _to_client(self, cmds: Iterator[commands.Command]) -> list[commands.Command]:
        out = list(cmds)
        data = b"".join(c.data for c in out if isinstance(c, commands.SendData))
        if data:
            self.h2.receive_data(data)
        return out

    def send(self) -> list[commands.Command]:
        return self._to_client(self.layer.handle_event(events.DataReceived(self.ctx.client, self.h2.data_to_send())))

    def request(self, sid: int) -> None:
        self.h2.send_headers(sid, BINDING, end_stream=False)
        self.h2.send_data(sid, b'{"kind":"Binding"}', end_stream=True)
        self.send()

    def answer(self, sid: int) -> None:
        body = b'{"kind":"Status"}'
        response = http.Response.make(201, body, {"content-type": "application/json"})
        self._to_client(self.layer.handle_event(ResponseHeaders(sid, response, False)))
        self._to_client(self.layer.handle_event(ResponseData(sid, body)))
        self._to_client(self.layer.handle_event(ResponseEndOfMessage(sid)))
        self.send()

    def reset(self, sid: int) -> None:
        self._to_client(self.layer.handle_event(ResponseProtocolError(sid, "killed", ErrorCode.KILL)))


@pytest.fixture
def client() -> Iterator[_Client]:
    with taddons.context(proxyserver.Proxyserver()) as tctx:
        ctx = Context(tflow.tclient_conn(), tctx.options)
        ctx.client.alpn = b"h2"
        yield _Client(ctx)


@pytest.mark.parametrize("ending", ["answered", "reset by the proxy", "both, interleaved"])
def test_a_long_lived_client_connection_keeps_nothing_per_finished_request(client: _Client, ending: str) -> None:
    """mitmproxy 12.3 kept one entry per answered request in the layer's `streams`, and hyper-h2 one in its
    closed-stream table (up to 65,536): a 1 M-request soak on 4 connections grew the proxy by 225 MB."""
    n = 3000
    for i in range(n):
        sid = client.h2.get_next_available_stream_id()
        client.request(sid)
        reset = ending == "reset by the proxy" or (ending == "both, interleaved" and i % 2)
        client.reset(sid) if reset else client.answer(sid)
        assert client.h2.streams[sid].closed, "the client saw its stream end"
    assert len(client.layer.streams) == 0, "the layer's own table"
    assert len(client.layer.h2_conn.streams) <= stream_counts.PRUNE_SLACK + 1, "hyper-h2's live table"
    resets = {"answered": 0, "reset by the proxy": n, "both, interleaved": n // 2}[ending]
    # every reset is remembered (up to hyper-h2's bound) but the newest still in the live table; nothing else is
    assert resets - stream_counts.PRUNE_SLACK - 1 <= len(client.layer.h2_conn._closed_streams) <= resets
    assert set(client.layer.h2_conn._closed_streams.values()) <= {h2.stream.StreamClosedBy.SEND_RST_STREAM}


def test_a_late_frame_on_a_stream_the_proxy_reset_is_still_only_a_stream_error(client: _Client) -> None:
    first = client.h2.get_next_available_stream_id()
    client.h2.send_headers(first, BINDING, end_stream=False)
    client.send()
    client.reset(first)  # the client has not seen the reset yet: its DATA is in flight
    for _ in range(stream_counts.PRUNE_SLACK + 10):  # enough finished streams after it for it to be pruned
        sid = client.h2.get_next_available_stream_id()
        client.request(sid)
        client.answer(sid)
    assert first not in client.layer.h2_conn.streams, "pruned from hyper-h2's live table"
    late = hyperframe.frame.DataFrame(first, b"late", flags=["END_STREAM"])
    cmds = list(client.layer.handle_event(events.DataReceived(client.ctx.client, late.serialize())))
    assert not any(isinstance(c, commands.CloseConnection) for c in cmds)
    sent = b"".join(c.data for c in cmds if isinstance(c, commands.SendData))
    frame, _ = hyperframe.frame.Frame.parse_frame_header(memoryview(sent[:9]))
    assert isinstance(frame, hyperframe.frame.RstStreamFrame) and frame.stream_id == first


def test_a_long_lived_upstream_connection_forgets_the_id_mapping_of_finished_streams() -> None:
    """mitmproxy 12.3's Http2Client kept both id maps (client's stream id <-> its own) for every request."""
    with taddons.context(proxyserver.Proxyserver()) as tctx:
        ctx = Context(tflow.tclient_conn(), tctx.options)
        ctx.server = tflow.tserver_conn()
        ctx.server.alpn = b"h2"
        layer = _http2.Http2Client(ctx)
        server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        server.initiate_connection()

        def run(cmds: Iterator[commands.Command]) -> None:
            for _ in range(10):  # until neither side has anything left to say (bounded)
                data = b"".join(c.data for c in cmds if isinstance(c, commands.SendData))
                if data:
                    server.receive_data(data)
                back = server.data_to_send()
                if not back:
                    return
                cmds = layer.handle_event(events.DataReceived(ctx.server, back))

        run(layer.handle_event(events.Start()))
        n = 3000
        for i in range(n):
            theirs = 2 * i + 1  # the client's stream ids, as the HttpStream names them
            request = http.Request.make("POST", "https://x/api/v1/namespaces/d/pods/p/binding", b"")
            request.authority = "x"
            run(layer.handle_event(RequestHeaders(theirs, request, True)))
            run(layer.handle_event(RequestEndOfMessage(theirs)))
            ours = layer.our_stream_id[theirs]
            server.send_headers(ours, [(":status", "201")], end_stream=True)
            run(iter(()))
            assert ours not in layer.streams, "mitmproxy dropped it itself"
        assert len(layer.our_stream_id) == len(layer.their_stream_id) <= stream_counts.PRUNE_SLACK + 1


# sha256 (first 16 hex digits) of mitmproxy 12.x's Http2Client._handle_event, which stream_queue._client_handle_one
# reproduces for one event and stream_queue._client_handle_event drains without recursion.
CLIENT_HANDLE_EVENT_SHA = "02de05a5b89f087b"


def test_the_reproduced_upstream_stream_mapping_is_still_mitmproxys() -> None:
    source = inspect.getsource(stream_queue._mitmproxy_client_handle_event)
    assert hashlib.sha256(source.encode()).hexdigest()[:16] == CLIENT_HANDLE_EVENT_SHA, (
        "mitmproxy changed Http2Client._handle_event: check stream_queue._client_handle_one against it")


class _Upstream:
    """mitmproxy's upstream-facing HTTP/2 layer and an h2 server behind it, which has not spoken yet."""

    def __init__(self, ctx: Context, server_limit: int) -> None:
        self.ctx = ctx
        self.layer = _http2.Http2Client(ctx)
        self.server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        self.server.local_settings.max_concurrent_streams = server_limit
        self.server.local_settings.acknowledge()
        self.server.initiate_connection()  # its SETTINGS go out on the first server_speaks()
        self.opened: list[int] = []  # the server's stream ids, in the order their requests arrived
        self.sent: list[commands.Command] = []
        self.deliver(self.layer.handle_event(events.Start()))

    def deliver(self, cmds: Iterator[commands.Command]) -> None:
        out = list(cmds)
        self.sent += out
        data = b"".join(c.data for c in out if isinstance(c, commands.SendData))
        if data:
            for ev in self.server.receive_data(data):
                if isinstance(ev, h2.events.RequestReceived):
                    self.opened.append(ev.stream_id)

    def server_speaks(self) -> None:
        while back := self.server.data_to_send():
            self.deliver(self.layer.handle_event(events.DataReceived(self.ctx.server, back)))

    def request(self, theirs: int) -> None:
        request = http.Request.make("POST", "https://x/api/v1/namespaces/d/pods/p/binding", b"")
        request.authority = "x"
        self.deliver(self.layer.handle_event(RequestHeaders(theirs, request, False)))
        self.deliver(self.layer.handle_event(RequestEndOfMessage(theirs)))


@pytest.fixture
def upstream_ctx() -> Iterator[Context]:
    with taddons.context(proxyserver.Proxyserver()) as tctx:
        ctx = Context(tflow.tclient_conn(), tctx.options)
        ctx.server = tflow.tserver_conn()
        ctx.server.alpn = b"h2"
        yield ctx


@pytest.mark.parametrize("patched", [True, False], ids=["drained in a loop", "mitmproxy's recursion"])
def test_a_thousand_requests_queued_before_the_servers_settings_are_all_sent_once_they_arrive(
        upstream_ctx: Context, patched: bool) -> None:
    """A new upstream connection takes 10 streams until the server's first SETTINGS; a held-back wave sends
    ~1,000 at once. mitmproxy drained its queue by recursing once per queued stream: 'mitmproxy has crashed!'
    (RecursionError), and the requests taken off the queue were never sent nor answered."""
    if not patched:
        _http2.Http2Client._handle_event = stream_queue._mitmproxy_client_handle_event  # type: ignore[method-assign]
    try:
        up = _Upstream(upstream_ctx, server_limit=10_000)
        n = 2000
        theirs = [2 * i + 1 for i in range(n)]
        for sid in theirs:
            up.request(sid)
        assert len(up.opened) == 10 and len(up.layer.stream_queue) == n - 10, "provisional limit of 10"
        if not patched:
            with pytest.raises(RecursionError):
                up.server_speaks()
            return
        up.server_speaks()
    finally:
        _http2.Http2Client._handle_event = stream_queue._client_handle_event  # type: ignore[assignment]
    assert not up.layer.stream_queue
    assert len(up.opened) == n and len(set(up.opened)) == n
    # first queued, first sent: the client's stream ids reach the server in the order they were asked
    assert [up.layer.their_stream_id[ours] for ours in up.opened] == theirs
    for ours in up.opened:
        assert up.server.streams[ours].state_machine.state == h2.stream.StreamState.HALF_CLOSED_REMOTE, (
            "headers and END_STREAM both arrived")


def test_queued_requests_go_out_as_the_servers_streams_free_up(upstream_ctx: Context) -> None:
    up = _Upstream(upstream_ctx, server_limit=50)
    up.server_speaks()
    n = 1500
    theirs = [2 * i + 1 for i in range(n)]
    for sid in theirs:
        up.request(sid)
    assert len(up.opened) == 50 and len(up.layer.stream_queue) == n - 50
    answered = 0
    while answered < len(up.opened):  # the server answers each request in arrival order, one at a time
        up.server.send_headers(up.opened[answered], [(":status", "201")], end_stream=True)
        answered += 1
        up.server_speaks()
        assert len(up.opened) - answered <= 50, "never more than the server's limit in flight"
    assert answered == n and not up.layer.stream_queue
    answers = [c for c in up.sent if isinstance(c, ReceiveHttp) and isinstance(c.event, ResponseHeaders)]
    assert [c.event.stream_id for c in answers] == theirs, "each answer reaches the client's stream, in order"


def test_every_part_is_pinned_to_the_verified_source() -> None:
    for change in (stream_limit, stream_counts, stream_queue):
        assert patches.mismatch(change) is None, f"mitmproxy or hyper-h2 changed what {change.__name__} relies on"
    assert stream_counts.PINNED["h2.connection.H2Connection._open_streams"] == OPEN_STREAMS_SHA
    assert stream_queue.PINNED["mitmproxy.proxy.layers.http._http2.Http2Client._handle_event"] == CLIENT_HANDLE_EVENT_SHA
