"""HTTP/2 streams: the limit the proxy advertises to its clients, counted in O(1), bounded, queued in a loop.

What it replaces: mitmproxy's `Http2Server.__init__` and `Http2Connection.__init__` (wrapped: the limit,
and the layer each h2 connection belongs to), `Http2Client._handle_event` (its queue drained in a loop),
hyper-h2's `H2Connection._begin_new_stream` and `_open_streams` and `H2StreamStateMachine.process_input`
(wrapped or reproduced: the count, and what finished streams leave behind). Why, part by part:

mitmproxy has no option for the limit: its client-facing `Http2Server` keeps hyper-h2's default of
100 concurrent streams. client-go's transport does not wait for a free stream (its
`StrictMaxConcurrentStreams` is false): every request that finds all connections full dials a
new TLS connection. A 1,000-Binding burst then dials ~2,000 connections through the proxy, each a
Python TLS handshake on both sides, and the scheduler's timing is the proxy's, not its own. With a
limit above the burst, the same burst shares one connection.

Once thousands of streams share one connection, hyper-h2's way of counting open streams costs
most of the proxy's time: `H2Connection._open_streams` walks every stream whenever a stream is
opened (both sides check the limit), which makes a burst O(n²) — a third of the proxy's CPU in a
3,000-request burst. Here each connection keeps the count as its streams change state.

What a long-lived connection keeps of its finished streams is bounded here too (a soak of 1 M
requests on 4 connections grew the proxy from 136 to 361 MB; bench/memory_soak.py shows it):
- mitmproxy 12.3's `Http2Connection.streams` (stream id -> state) drops a stream when the peer ends
  it after we did, or resets it, but not when *we* end or reset it last — which is every answered
  request on a client connection: one entry per request, until the connection closes. Here a stream
  leaves it as our END_STREAM or RST_STREAM closes it (after which mitmproxy reads it no more).
- hyper-h2 remembers how each closed stream ended, up to 65,536 per connection (~11 MB), only to tell
  a peer's late frames on a stream *we reset* (a stream error) from frames on one that ended normally
  (a connection error either way: GOAWAY STREAM_CLOSED, or PROTOCOL_ERROR once forgotten). Here only
  resets are remembered: a late frame on a stream that ended normally gets PROTOCOL_ERROR at once.
- mitmproxy's `Http2Client` maps each client stream id to its upstream one, both ways, and never
  forgets: two entries per request on an upstream connection. Here a closed stream's pair goes
  when hyper-h2's table drops it, once mitmproxy's `streams` no longer holds it (nothing maps it then).

Streams waiting for the upstream's limit are sent in a loop, not by recursion. mitmproxy's `Http2Client`
queues a request that finds the upstream connection's streams all taken (and, until the server's
first SETTINGS frame arrives, more than 10 of them), then drains the queue by calling itself once
per queued stream: with ~1,000 queued — the wave of a held-back 3,000-pod burst on a new connection —
Python's recursion limit is hit and mitmproxy logs "mitmproxy has crashed!" and carries on, but the
requests it had taken off the queue are lost: never sent upstream, never answered, while the
connection stays open (1-3 times a run in 12 of 15 YuniKorn seed-scale runs, none in kube-scheduler's;
in one, a YuniKorn Binding waited 164 s for its answer, until the apiserver closed that connection).
Here the same queue is drained in a loop (first queued stream first; a stream's events in order).

What it bought (measured when each part landed; see the performance record): a 1,000-Binding burst on
one connection instead of ~2,000 dials; a third of the proxy's CPU in a 3,000-request burst (the O(n²)
count); a 1 M-request soak flat (136 -> 361 MB before); no "mitmproxy has crashed!" in a seed-scale wave.
Skipped (a library source differs), the proxy advertises hyper-h2's 100 streams and client-go dials
more connections under a burst: the proxy still works, with a timing of its own. `tests/unit/test_streams.py`
checks each part against the library's own behaviour.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from typing import Any

import h2.connection
import h2.stream
from mitmproxy.proxy.commands import Command
from mitmproxy.proxy.events import Event
from mitmproxy.proxy.layers.http import _http2
from mitmproxy.proxy.layers.http._base import ReceiveHttp
from mitmproxy.proxy.layers.http._events import HttpEvent

# Above a 3,000-pod burst plus the scheduler's watches and the backlog that forms meanwhile; not
# the burst size itself (held watches would push a burst of exactly that size over the limit).
DEFAULT = 4096
MAX = 2**31 - 1  # RFC 9113 §6.5.2: a 31-bit value
# Closed streams are dropped from a connection's table (as hyper-h2's own count does) once they
# outnumber its open ones by this much: amortised O(1), and the table stays bounded.
PRUNE_SLACK = 128

_limit = DEFAULT
_server_init = _http2.Http2Server.__init__
_connection_init = _http2.Http2Connection.__init__
_mitmproxy_client_handle_event = _http2.Http2Client._handle_event  # recursive: kept for the pin
_begin_new_stream = h2.connection.H2Connection._begin_new_stream
_open_streams = h2.connection.H2Connection._open_streams
_process_input = h2.stream.H2StreamStateMachine.process_input
_IS_OPEN = h2.stream.STREAM_OPEN
TALLY = "_kfp_open_streams"  # per connection: [open streams with even ids, with odd ids]
LAYER = "_kfp_layer"  # per connection: the mitmproxy Http2Connection layer that owns it
PINNED = {
    "mitmproxy.proxy.layers.http._http2.Http2Server.__init__": "fbaceff7e0dfcd9e",
    "mitmproxy.proxy.layers.http._http2.Http2Connection.__init__": "1614b5711609de26",
    "mitmproxy.proxy.layers.http._http2.Http2Client._handle_event": "02de05a5b89f087b",
    "h2.connection.H2Connection._begin_new_stream": "de40fc0b03dfa443",
    "h2.connection.H2Connection._open_streams": "28d9501144f0cee7",
    "h2.stream.H2StreamStateMachine.process_input": "26e4dd5f305754ee",
}
ORIGINALS: dict[str, Any] = {
    "mitmproxy.proxy.layers.http._http2.Http2Server.__init__": _server_init,
    "mitmproxy.proxy.layers.http._http2.Http2Connection.__init__": _connection_init,
    "mitmproxy.proxy.layers.http._http2.Http2Client._handle_event": _mitmproxy_client_handle_event,
    "h2.connection.H2Connection._begin_new_stream": _begin_new_stream,
    "h2.connection.H2Connection._open_streams": _open_streams,
    "h2.stream.H2StreamStateMachine.process_input": _process_input,
}
_OUR_CLOSE = (h2.stream.StreamInputs.SEND_END_STREAM, h2.stream.StreamInputs.SEND_RST_STREAM)
_RESETS = (h2.stream.StreamClosedBy.SEND_RST_STREAM, h2.stream.StreamClosedBy.RECV_RST_STREAM)


def _init_connection(self: Any, context: Any, conn: Any) -> None:
    _connection_init(self, context, conn)
    self.h2_conn.__dict__[LAYER] = self


def _init_server(self: Any, context: Any) -> None:
    _server_init(self, context)
    settings = self.h2_conn.local_settings
    settings.max_concurrent_streams = _limit
    # hyper-h2 sends acknowledged values in the connection preface (mitmproxy does the same for
    # its window size), and checks new streams against the acknowledged value.
    settings.acknowledge()


def _counted_begin_new_stream(self: Any, stream_id: int, allowed_ids: Any) -> Any:
    tally = self.__dict__.get(TALLY)
    if tally is None:
        # A connection that had streams before counting was installed keeps hyper-h2's own count.
        tally = self.__dict__[TALLY] = [0, 0] if not self.streams else False
    stream = _begin_new_stream(self, stream_id, allowed_ids)
    if tally is not False:
        machine: Any = stream.state_machine
        machine._kfp_tally = tally
        machine._kfp_parity = stream_id % 2
        layer = self.__dict__.get(LAYER)
        machine._kfp_layer_streams = None if layer is None else layer.streams
        if _IS_OPEN[machine.state]:
            tally[stream_id % 2] += 1
    return stream


def _counted_process_input(self: Any, input_: Any) -> Any:
    was_open = _IS_OPEN[self.state]
    try:
        return _process_input(self, input_)
    finally:
        is_open = _IS_OPEN[self.state]
        if was_open != is_open:
            tally = self.__dict__.get("_kfp_tally")
            if tally is not None:
                tally[self._kfp_parity] += 1 if is_open else -1
                if not is_open and input_ in _OUR_CLOSE and self._kfp_layer_streams is not None:
                    self._kfp_layer_streams.pop(self.stream_id, None)


def _counted_open_streams(self: Any, remainder: int) -> int:
    tally = self.__dict__.get(TALLY)
    if not tally:
        return int(_open_streams(self, remainder))
    if len(self.streams) > tally[0] + tally[1] + PRUNE_SLACK:
        _drop_closed(self)
    return int(tally[remainder])


def _drop_closed(self: Any) -> None:
    """hyper-h2's walk (`_open_streams`) without its count: drops closed streams, remembers the reset ones;
    on an upstream connection, also the id mapping of each one mitmproxy is done with."""
    streams, remembered = self.streams, self._closed_streams
    layer = self.__dict__.get(LAYER)
    theirs = getattr(layer, "their_stream_id", None)  # Http2Client: our stream id -> the client's
    for stream_id in [i for i, stream in streams.items() if stream.closed]:
        closed_by = streams.pop(stream_id).closed_by
        if closed_by in _RESETS:
            remembered[stream_id] = closed_by
        if theirs is not None and stream_id not in layer.streams:
            their = theirs.pop(stream_id, None)
            if their is not None:
                layer.our_stream_id.pop(their, None)


def _client_limit(layer: Any) -> int:
    return int(layer.provisional_max_concurrency or layer.h2_conn.remote_settings.max_concurrent_streams)


def _client_handle_one(layer: Any, event: Event) -> Generator[Command, Any, None]:
    """`Http2Client._handle_event` for one event, without draining the queue: map the client's stream id
    to ours (queue the event when no stream is free), then handle it."""
    if isinstance(event, HttpEvent):
        ours = layer.our_stream_id.get(event.stream_id, None)
        if ours is None:
            if layer.h2_conn.open_outbound_streams >= _client_limit(layer):
                layer.stream_queue[event.stream_id].append(event)
                return
            ours = layer.h2_conn.get_next_available_stream_id()
            layer.our_stream_id[event.stream_id] = ours
            layer.their_stream_id[ours] = event.stream_id
        event.stream_id = ours
    for cmd in layer._handle_event2(event):
        if isinstance(cmd, ReceiveHttp):
            cmd.event.stream_id = layer.their_stream_id[cmd.event.stream_id]
        yield cmd


def _client_handle_event(layer: Any, event: Event) -> Generator[Command, Any, None]:
    """The event, then the queued streams while streams are free: first queued first, a stream's events
    in order (mitmproxy recursed here once per queued stream)."""
    yield from _client_handle_one(layer, event)
    pending: deque[Event] = deque()
    while pending or (layer.stream_queue and layer.h2_conn.open_outbound_streams < _client_limit(layer)):
        if not pending:
            pending.extend(layer.stream_queue.pop(next(iter(layer.stream_queue))))
        yield from _client_handle_one(layer, pending.popleft())


def apply(target: Any) -> None:
    """Advertise the target's stream limit and count streams in O(1) (idempotent)."""
    install(target.stream_limit)


def revert() -> None:
    """mitmproxy's and hyper-h2's own code back (connections made meanwhile keep what they counted)."""
    _http2.Http2Server.__init__ = _server_init  # type: ignore[method-assign]
    _http2.Http2Connection.__init__ = _connection_init  # type: ignore[method-assign]
    _http2.Http2Client._handle_event = _mitmproxy_client_handle_event  # type: ignore[method-assign]
    h2.connection.H2Connection._begin_new_stream = _begin_new_stream  # type: ignore[method-assign]
    h2.connection.H2Connection._open_streams = _open_streams  # type: ignore[method-assign]
    h2.stream.H2StreamStateMachine.process_input = _process_input  # type: ignore[method-assign]


def install(limit: int = DEFAULT) -> None:
    """Advertise `limit` streams on every client connection accepted from now on; count in O(1)."""
    global _limit
    if not 1 <= limit <= MAX:
        raise ValueError(f"the stream limit must be between 1 and {MAX}, got {limit}")
    _limit = limit
    _http2.Http2Server.__init__ = _init_server  # type: ignore[method-assign]
    _http2.Http2Connection.__init__ = _init_connection  # type: ignore[method-assign]
    _http2.Http2Client._handle_event = _client_handle_event  # type: ignore[assignment]
    h2.connection.H2Connection._begin_new_stream = _counted_begin_new_stream  # type: ignore[method-assign]
    h2.connection.H2Connection._open_streams = _counted_open_streams  # type: ignore[method-assign]
    h2.stream.H2StreamStateMachine.process_input = _counted_process_input  # type: ignore[method-assign]
