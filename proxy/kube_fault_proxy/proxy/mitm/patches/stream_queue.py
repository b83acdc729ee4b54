"""HTTP/2 streams waiting for the upstream's limit are sent in a loop, not by recursion.

What it replaces: mitmproxy's `Http2Client._handle_event` (reproduced for one event, its queue drained in a
loop). Why: mitmproxy's `Http2Client` queues a request that finds the upstream connection's streams all taken
(and, until the server's first SETTINGS frame arrives, more than 10 of them), then drains the queue by calling
itself once per queued stream: with ~1,000 queued — the wave of a held-back 3,000-pod burst on a new
connection — Python's recursion limit is hit and mitmproxy logs "mitmproxy has crashed!" and carries on, but the
requests it had taken off the queue are lost: never sent upstream, never answered, while the connection stays
open (1-3 times a run in 12 of 15 YuniKorn seed-scale runs, none in kube-scheduler's; in one, a YuniKorn Binding
waited 164 s for its answer, until the apiserver closed that connection). Here the same queue is drained in a
loop (first queued stream first; a stream's events in order).

What it bought (measured when it landed; see the performance record): no "mitmproxy has crashed!" in a
seed-scale wave. Skipped, mitmproxy's recursion is back, and a wave that queues ~1,000 streams on a new upstream
connection may lose requests. `tests/unit/test_streams.py` checks it against the library's own behaviour.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from typing import Any

from mitmproxy.proxy.commands import Command
from mitmproxy.proxy.events import Event
from mitmproxy.proxy.layers.http import _http2
from mitmproxy.proxy.layers.http._base import ReceiveHttp
from mitmproxy.proxy.layers.http._events import HttpEvent

_mitmproxy_client_handle_event = _http2.Http2Client._handle_event  # recursive: kept for the pin
PINNED = {"mitmproxy.proxy.layers.http._http2.Http2Client._handle_event": "02de05a5b89f087b"}
ORIGINALS: dict[str, Any] = {"mitmproxy.proxy.layers.http._http2.Http2Client._handle_event":
                             _mitmproxy_client_handle_event}


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
    """Drain the queue of streams waiting for the upstream's limit in a loop (idempotent)."""
    install()


def revert() -> None:
    """mitmproxy's own recursion back."""
    _http2.Http2Client._handle_event = _mitmproxy_client_handle_event  # type: ignore[method-assign]


def install() -> None:
    """Drain in a loop on every upstream connection from now on."""
    _http2.Http2Client._handle_event = _client_handle_event  # type: ignore[assignment]
