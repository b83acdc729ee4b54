"""HTTP/2 stream counts in O(1), and bounded tables of finished streams on long-lived connections.

What it replaces: mitmproxy's `Http2Connection.__init__` (wrapped: each h2 connection learns the layer it belongs
to), hyper-h2's `H2Connection._begin_new_stream` and `_open_streams` and `H2StreamStateMachine.process_input`
(wrapped or reproduced: the count, and what finished streams leave behind). Why, part by part:

Once thousands of streams share one connection (the stream limit, stream_limit.py), hyper-h2's way of counting
open streams costs most of the proxy's time: `H2Connection._open_streams` walks every stream whenever a stream is
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

What it bought (measured when each part landed; see the performance record): a third of the proxy's CPU in a
3,000-request burst (the O(n²) count); a 1 M-request soak flat (136 -> 361 MB before). Skipped, hyper-h2
counts by its walk and the tables grow with a connection's requests. `tests/unit/test_streams.py` checks each
part against the library's own behaviour.
"""

from __future__ import annotations

from typing import Any

import h2.connection
import h2.stream
from mitmproxy.proxy.layers.http import _http2

# Closed streams are dropped from a connection's table (as hyper-h2's own count does) once they
# outnumber its open ones by this much: amortised O(1), and the table stays bounded.
PRUNE_SLACK = 128

_connection_init = _http2.Http2Connection.__init__
_begin_new_stream = h2.connection.H2Connection._begin_new_stream
_open_streams = h2.connection.H2Connection._open_streams
_process_input = h2.stream.H2StreamStateMachine.process_input
_IS_OPEN = h2.stream.STREAM_OPEN
TALLY = "_kfp_open_streams"  # per connection: [open streams with even ids, with odd ids]
LAYER = "_kfp_layer"  # per connection: the mitmproxy Http2Connection layer that owns it
PINNED = {
    "mitmproxy.proxy.layers.http._http2.Http2Connection.__init__": "1614b5711609de26",
    "h2.connection.H2Connection._begin_new_stream": "de40fc0b03dfa443",
    "h2.connection.H2Connection._open_streams": "28d9501144f0cee7",
    "h2.stream.H2StreamStateMachine.process_input": "26e4dd5f305754ee",
}
ORIGINALS: dict[str, Any] = {
    "mitmproxy.proxy.layers.http._http2.Http2Connection.__init__": _connection_init,
    "h2.connection.H2Connection._begin_new_stream": _begin_new_stream,
    "h2.connection.H2Connection._open_streams": _open_streams,
    "h2.stream.H2StreamStateMachine.process_input": _process_input,
}
_OUR_CLOSE = (h2.stream.StreamInputs.SEND_END_STREAM, h2.stream.StreamInputs.SEND_RST_STREAM)
_RESETS = (h2.stream.StreamClosedBy.SEND_RST_STREAM, h2.stream.StreamClosedBy.RECV_RST_STREAM)


def _init_connection(self: Any, context: Any, conn: Any) -> None:
    _connection_init(self, context, conn)
    self.h2_conn.__dict__[LAYER] = self


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


def apply(target: Any) -> None:
    """Count streams in O(1) and bound the tables of finished ones (idempotent)."""
    install()


def revert() -> None:
    """mitmproxy's and hyper-h2's own code back (connections made meanwhile keep what they counted)."""
    _http2.Http2Connection.__init__ = _connection_init  # type: ignore[method-assign]
    h2.connection.H2Connection._begin_new_stream = _begin_new_stream  # type: ignore[method-assign]
    h2.connection.H2Connection._open_streams = _open_streams  # type: ignore[method-assign]
    h2.stream.H2StreamStateMachine.process_input = _process_input  # type: ignore[method-assign]


def install() -> None:
    """Count in O(1) on every connection made from now on."""
    _http2.Http2Connection.__init__ = _init_connection  # type: ignore[method-assign]
    h2.connection.H2Connection._begin_new_stream = _counted_begin_new_stream  # type: ignore[method-assign]
    h2.connection.H2Connection._open_streams = _counted_open_streams  # type: ignore[method-assign]
    h2.stream.H2StreamStateMachine.process_input = _counted_process_input  # type: ignore[method-assign]
