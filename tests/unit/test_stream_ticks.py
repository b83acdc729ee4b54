"""The mitmproxy internals a stream tick relies on (proxy.mitm.stream_ticks): an upgrade that moves any
of them fails here, naming what moved. The tick itself is driven end to end through a real proxy in
tests/integration/test_watch_and_connection_faults.py (delayed events on a quiet stream)."""

from __future__ import annotations

import inspect

import pytest
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


def test_an_end_is_routed_as_a_completion_and_read_as_the_answers_end() -> None:
    from mitmproxy.proxy.layers.http._events import ResponseEndOfMessage

    end = stream_ticks._End(9, stream_ticks._EndCommand())
    assert isinstance(end, events.CommandCompleted) and isinstance(end, ResponseEndOfMessage) and end.stream_id == 9
    streaming = inspect.getsource(HttpStream.state_stream_response_body)
    assert "elif isinstance(event, ResponseEndOfMessage):" in streaming and \
        "yield from self.send_response(already_streamed=True)" in streaming, \
        "HttpStream's streaming state no longer ends the answer on ResponseEndOfMessage"
    sending = inspect.getsource(HttpStream.send_response)
    assert sending.index("yield HttpResponseHook(self.flow)") < sending.index("self.server_state = self.state_done"), \
        "the response hook no longer runs before the stream is done (a stall holds an apiserver's end there)"


def test_ends_are_off_where_what_they_rely_on_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(stream_ticks.PINNED, "mitmproxy.proxy.layers.http.HttpStream.send_response",
                        "0000000000000000")
    monkeypatch.setattr(stream_ticks, "_verified", None)
    assert not stream_ticks.end("no-such-client", object())
