"""HTTP/2 stream limit: the concurrent streams the proxy advertises to its clients, in its first SETTINGS frame.

What it replaces: mitmproxy's `Http2Server.__init__` (wrapped: the connection's local settings get the limit
before the connection preface is sent). Why: mitmproxy has no option for the limit, so its client-facing
`Http2Server` keeps hyper-h2's default of 100 concurrent streams. client-go's transport does not wait for a
free stream (its `StrictMaxConcurrentStreams` is false): every request that finds all connections full dials a
new TLS connection. A 1,000-Binding burst then dials ~2,000 connections through the proxy, each a Python TLS
handshake on both sides, and the scheduler's timing is the proxy's, not its own. With a limit above the burst,
the same burst shares one connection.

What it bought (measured when it landed; see the performance record): a 1,000-Binding burst on one connection
instead of ~2,000 dials. Skipped (`--stock-mitmproxy`, or a pinned source differs), the limit is set through
hyper-h2's own `update_settings` once a connection's first request arrives (`proxy/mitm/stream_settings.py`):
the client may open the limit's streams from the proxy's first answer on, not from its first frame.
`tests/unit/test_streams.py` checks it against the library's own behaviour.
"""

from __future__ import annotations

from typing import Any

from mitmproxy.proxy.layers.http import _http2

# Above a 3,000-pod burst plus the scheduler's watches and the backlog that forms meanwhile; not
# the burst size itself (held watches would push a burst of exactly that size over the limit).
DEFAULT = 4096
MAX = 2**31 - 1  # RFC 9113 §6.5.2: a 31-bit value
H2_DEFAULT = 100  # what hyper-h2 advertises unless told otherwise

_limit = DEFAULT
_server_init = _http2.Http2Server.__init__
PINNED = {"mitmproxy.proxy.layers.http._http2.Http2Server.__init__": "fbaceff7e0dfcd9e"}
ORIGINALS: dict[str, Any] = {"mitmproxy.proxy.layers.http._http2.Http2Server.__init__": _server_init}


def _init_server(self: Any, context: Any) -> None:
    _server_init(self, context)
    settings = self.h2_conn.local_settings
    settings.max_concurrent_streams = _limit
    # hyper-h2 sends acknowledged values in the connection preface (mitmproxy does the same for
    # its window size), and checks new streams against the acknowledged value.
    settings.acknowledge()


def check(limit: int) -> None:
    """ValueError for a limit HTTP/2 cannot carry."""
    if not 1 <= limit <= MAX:
        raise ValueError(f"the stream limit must be between 1 and {MAX}, got {limit}")


def apply(target: Any) -> None:
    """Advertise the target's stream limit (idempotent)."""
    install(target.stream_limit)


def revert() -> None:
    """mitmproxy's own `Http2Server.__init__` back (connections made meanwhile keep their limit)."""
    _http2.Http2Server.__init__ = _server_init  # type: ignore[method-assign]


def install(limit: int = DEFAULT) -> None:
    """Advertise `limit` streams on every client connection accepted from now on."""
    global _limit
    check(limit)
    _limit = limit
    _http2.Http2Server.__init__ = _init_server  # type: ignore[method-assign]
