"""Editing a watch as it streams: whole events through the fault's editor, each edit journaled."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from kube_fault_proxy.proxy.engine import Decision
from kube_fault_proxy.proxy.requests.watch import TICK, EventEditor, EventStream

log = logging.getLogger(__name__)
JSON_TYPES = ("application/json",)
Chunks = Callable[[bytes], list[bytes]]  # mitmproxy's stream callable: b"" marks the end


def json_accept(accept: str) -> str | None:
    """The Accept header that asks for a JSON watch, if the client's Accept allows JSON at all (client-go's
    protobuf clients send `application/vnd.kubernetes.protobuf, */*` or `..., application/json`): None if it
    allows only protobuf; the header itself if it asks for nothing in particular (the apiserver answers JSON)."""
    ranges = [part.split(";")[0].strip().lower() for part in accept.split(",") if part.strip()]
    if not ranges:
        return accept
    if any(r in ("application/json", "application/*", "*/*") for r in ranges):
        return "application/json"
    return None


def editable(content_type: str, content_encoding: str) -> bool:
    """Whether the editor can read a watch with these headers: JSON, not encoded."""
    return content_type.split(";")[0].strip() in JSON_TYPES and not content_encoding


def edited(editor: EventEditor, decision: Decision, stream_id: str, note: Callable[..., None],
           cut: Callable[[], None], wake: Callable[[], bool] | None = None,
           clock: Callable[[], float] = time.monotonic) -> Chunks:
    """The stream callable of one edited watch: events reassembled and edited whole, each edit noted
    as a `watch-event`; `cut` runs on the loop, just after the chunk, when the editor asks for it.
    With `wake` (which has the callable called with `TICK` soon, or says the stream is gone), an editor
    that wants a tick at a time of its own (`next_due`) gets it then."""
    events = EventStream(editor.edit)
    if wake is not None:
        soon = wake

        def request_tick() -> None:
            asyncio.get_running_loop().call_soon(soon)

        editor.request_tick = request_tick
    timer: asyncio.TimerHandle | None = None
    timer_due: float | None = None

    def fire() -> None:
        nonlocal timer, timer_due
        timer, timer_due = None, None
        if wake is not None:
            wake()

    def chunk(data: bytes) -> list[bytes]:
        nonlocal timer, timer_due
        try:
            out = editor.tick() if data is TICK else events.feed(data) if data else events.end() + editor.at_end()
        except Exception:  # never let an edit break the stream: pass the chunk on
            log.exception("watch edit failed; passing the chunk through")
            return [data] if data and data is not TICK else []
        for record in editor.records:
            note("watch-event", **decision.stamp(), stream=stream_id, **record)
        editor.records.clear()
        if editor.cut_connection:
            editor.cut_connection = False
            asyncio.get_running_loop().call_soon(cut)
        due = editor.next_due() if wake is not None and data else None
        if due != timer_due:
            if timer is not None:
                timer.cancel()
            timer, timer_due = None, due
            if due is not None:
                timer = asyncio.get_running_loop().call_later(max(0.0, due - clock()), fire)
        return out

    return chunk


def prefixed(initial: bytes, inner: Callable[[bytes], Iterable[bytes] | bytes] | bool) -> Chunks:
    """The stream callable that sends `initial` first (at the first chunk or tick), then does what `inner`
    did (another stream callable, or plain streaming)."""
    pending = [initial]

    def chunk(data: bytes) -> list[bytes]:
        out, pending[:] = list(pending), []
        if data is TICK:
            return out
        if callable(inner):
            got = inner(data)
            return out + ([got] if isinstance(got, bytes) else list(got))
        return out + ([data] if data else [])

    return chunk
