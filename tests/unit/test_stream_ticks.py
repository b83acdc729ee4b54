"""The mitmproxy internals a stream tick relies on (proxy.mitm.stream_ticks): an upgrade that moves any
of them fails here, naming what moved. The tick itself is driven end to end through a real proxy in
tests/integration/test_watch_and_connection_faults.py (delayed events on a quiet stream)."""

from __future__ import annotations

import inspect

from kube_fault_proxy.proxy.mitm.patches import stream_ticks
from kube_fault_proxy.proxy.requests.watch import TICK
from mitmproxy import version
from mitmproxy.proxy import events
from mitmproxy.proxy.layers.http import HttpLayer, HttpStream
from mitmproxy.proxy.layers.http._events import ResponseData


def test_the_version_it_was_verified_against() -> None:
    assert version.VERSION.startswith("12.3"), "stream_ticks was verified against mitmproxy 12.3 only"


def test_a_tick_is_routed_as_a_completion_and_read_as_data() -> None:
    tick = stream_ticks._Tick(7, stream_ticks._TickCommand())
    assert isinstance(tick, events.CommandCompleted) and isinstance(tick, ResponseData)
    assert tick.stream_id == 7 and tick.data is TICK
    layer = inspect.getsource(HttpLayer._handle_event)
    assert "elif isinstance(event, events.CommandCompleted):\n            stream = self.command_sources.pop(event.command)" \
        in layer, "HttpLayer no longer routes a completion to the stream that issued its command"
    assert "self.command_sources = {}" in inspect.getsource(HttpLayer.__init__)
    assert "self.streams = {}" in inspect.getsource(HttpLayer.__init__)
    streaming = inspect.getsource(HttpStream.state_stream_response_body)
    assert "if isinstance(event, ResponseData):\n            if callable(self.flow.response.stream):\n" \
           "                chunks = self.flow.response.stream(event.data)" in streaming, \
        "HttpStream's streaming state no longer hands ResponseData to the stream callable"
    assert "yield from self.server_state(event)" in inspect.getsource(HttpStream._handle_event)
