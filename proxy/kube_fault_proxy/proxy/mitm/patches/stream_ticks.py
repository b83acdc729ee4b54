"""Waking a streamed answer on a timer: its stream callable is called with `TICK` between upstream chunks.

What it replaces: mitmproxy calls a response's stream callable only when the upstream sends data or ends
the message, so a callable can hold an event back but never send it at a time of its own (a quiet watch
keeps what it holds until the apiserver's next bytes). What it buys: `delayEvents` delivers each held
event when it is due.

How: a tick is an event that is both a `ResponseData` (what `HttpStream`'s streaming state hands to the
callable, then sends what the callable returns as mitmproxy's own chunks) and a `CommandCompleted` (what
`HttpLayer` routes, through every layer above it untouched, to the stream registered in its
`command_sources` for that command). It enters through the connection handler's `server_event`, like any
event, so it is ordered with the connection's other events. Nothing is sent when the stream has left its
streaming state (ended, errored) or the connection is gone. Pinned to mitmproxy 12.3:
`tests/unit/test_stream_ticks.py` drives a real connection handler and fails loudly if an upgrade moves
any of it.

The same route ends a streamed answer at a time of the proxy's own (`end`, for `stallStream`): the event is then
a `ResponseEndOfMessage`, which the streaming state takes as the apiserver's end (the callable's last call, the
`response` hook, the client's END_STREAM); what the apiserver sends on that stream afterwards meets a finished
stream, which drops it.

Gated at run time, as a change is: it replaces no library code, but relies on how three of mitmproxy's functions
route an event (`PINNED`). Where one of them is not the source it was verified against, `wake` answers False
(said once in the log): a held event then leaves with the apiserver's next bytes, as without ticks.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

from mitmproxy.proxy import commands, events
from mitmproxy.proxy.layers.http import HttpLayer, HttpStream
from mitmproxy.proxy.layers.http._events import ResponseData, ResponseEndOfMessage
from mitmproxy.proxy.server import ConnectionHandler

from kube_fault_proxy.proxy.mitm.patches import internals
from kube_fault_proxy.proxy.requests.watch import TICK

log = logging.getLogger(__name__)
# What a tick relies on: the streaming state hands ResponseData to the callable, HttpLayer routes a
# CommandCompleted to the stream in `command_sources`, and the handler's `server_event` takes an event; an end,
# that the streaming state ends the answer on ResponseEndOfMessage through `send_response`.
PINNED = {
    "mitmproxy.proxy.layers.http.HttpStream.send_response": "d581bc106152e369",
    "mitmproxy.proxy.layers.http.HttpStream.state_stream_response_body": "3fb6320300d3ddd5",
    "mitmproxy.proxy.layers.http.HttpLayer._handle_event": "6ba31883cc7a06b3",
    "mitmproxy.proxy.server.ConnectionHandler.server_event": "a2b42657ebe8bf6d",
}
ORIGINALS: dict[str, Any] = {
    "mitmproxy.proxy.layers.http.HttpStream.send_response": HttpStream.send_response,
    "mitmproxy.proxy.layers.http.HttpStream.state_stream_response_body": HttpStream.state_stream_response_body,
    "mitmproxy.proxy.layers.http.HttpLayer._handle_event": HttpLayer._handle_event,
    "mitmproxy.proxy.server.ConnectionHandler.server_event": ConnectionHandler.server_event,
}
_verified: bool | None = None


def verified() -> bool:
    """Whether what a tick relies on is the source it was verified against (checked once, said once if not)."""
    global _verified
    if _verified is None:
        from kube_fault_proxy.proxy.mitm import patches  # the package's check, imported when first asked

        reason = patches.mismatch(sys.modules[__name__])
        if reason is not None:
            log.warning("kube-fault-proxy: stream ticks are off, held watch events leave with the apiserver's "
                        "next bytes: %s", reason)
        _verified = reason is None
    return _verified


class _TickCommand(commands.Command):
    """The command a tick answers (never issued: it only routes the tick to its stream)."""


class _Tick(ResponseData, events.CommandCompleted):
    """A tick: data for the stream's callable, routed as the completion of the stream's own command."""

    command: _TickCommand
    reply: Any

    def __init__(self, stream_id: int, command: _TickCommand) -> None:
        super().__init__(stream_id, TICK)
        self.command = command
        self.reply = None


class _EndCommand(commands.Command):
    """The command an end answers (never issued: it only routes the end to its stream; mitmproxy keeps one
    completion class per command class)."""


class _End(ResponseEndOfMessage, events.CommandCompleted):
    """The end of a streamed answer, sent by the proxy: routed as the completion of the stream's own command."""

    command: _EndCommand
    reply: Any

    def __init__(self, stream_id: int, command: _EndCommand) -> None:
        super().__init__(stream_id)
        self.command = command
        self.reply = None


def _stream_of(client_id: str, flow: object) -> tuple[Any, HttpLayer, HttpStream] | None:
    """The connection handler, HTTP layer and stream carrying this flow's answer, if it still streams."""
    handler = internals.handler(internals.proxyserver(), client_id)
    if handler is None:
        return None
    for layer in handler.layer.context.layers:
        if isinstance(layer, HttpLayer):
            for stream in layer.streams.values():
                if stream.flow is flow:
                    if stream.server_state != stream.state_stream_response_body:
                        return None
                    return handler, layer, stream
    return None


def _inject(client_id: str, flow: object, make: Any, command_type: type[commands.Command]) -> bool:
    """Route `make(stream_id, command)` (a command of `command_type`) to the stream of this flow, from the loop,
    as the connection's events allow; False if the flow no longer streams, or ticks are off (`verified`)."""
    if not verified():
        return False
    found = _stream_of(client_id, flow)
    if found is None:
        return False
    handler, layer, stream = found
    command = command_type()
    layer.command_sources[command] = stream
    asyncio.get_running_loop().create_task(handler.server_event(make(stream.stream_id, command)))
    return True


def end(client_id: str, flow: object) -> bool:
    """End this flow's streamed answer (of that client connection) cleanly now, as if the apiserver had: its
    callable is called with b"", the `response` hook runs, the client gets the end of the stream. False if the
    flow no longer streams, or ticks are off (`verified`)."""
    return _inject(client_id, flow, _End, _EndCommand)


def wake(client_id: str, flow: object) -> bool:
    """Have the stream callable of this flow (of that client connection) called with TICK, from the loop,
    as soon as the connection's events allow; False if the flow no longer streams, or ticks are off (`verified`)."""
    return _inject(client_id, flow, _Tick, _TickCommand)
