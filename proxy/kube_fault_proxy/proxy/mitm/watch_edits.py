"""Watch edits as an addon of their own: whole events through the fault's editor as the watch streams, each edit
journaled, with the ticks that let an editor send at a time of its own and the signals it may wait on.

The fault addon decides and stamps the decision (`flow_keys.DECISION`); `WatchEdits`, after it in the chain, reads
an `EditEvents` step there in its own `request` hook: it stamps the editor (`flow_keys.EDITOR`, which the stale
views read: a held watch's own events never release it) and asks for the one form the editor reads (JSON,
uncompressed; journaled). In `responseheaders` it streams the watch through the editor, which waits on other
watches through the plain `WatchSignals` that `mitm/server.py` makes, and is woken on a timer by the stream ticks
(`patches/stream_ticks.py`). The stale views, after it, wrap that stream with their scan of the apiserver's bytes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable

from mitmproxy import http

from kube_fault_proxy.proxy.activations import Activations
from kube_fault_proxy.proxy.engine import Decision
from kube_fault_proxy.proxy.faults.plan import EditEvents
from kube_fault_proxy.proxy.mitm.flow_keys import DECISION, EDITOR, IDENT
from kube_fault_proxy.proxy.mitm.patches import internals, stream_ticks
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.requests.watch import TICK, EventEditor, EventStream
from kube_fault_proxy.proxy.watch_signals import WatchSignals

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
           clock: Callable[[], float] = time.monotonic, over: Callable[[], bool] | None = None) -> Chunks:
    """The stream callable of one edited watch: events reassembled and edited whole, each edit noted
    as a `watch-event`; `cut` runs on the loop, just after the chunk, when the editor asks for it.
    With `wake` (which has the callable called with `TICK` soon, or says the stream is gone), an editor
    that wants a tick at a time of its own (`next_due`) gets it then. Once `over` says the activation that
    decided it is over, the editor releases what it keeps back (journaled) and the rest of the stream passes as
    the apiserver sends it."""
    return EditedWatch(editor, decision, stream_id, note, cut, wake, clock, over)


class EditedWatch:
    """One edited watch's stream callable (`edited`)."""

    def __init__(self, editor: EventEditor, decision: Decision, stream_id: str, note: Callable[..., None],
                 cut: Callable[[], None], wake: Callable[[], bool] | None, clock: Callable[[], float],
                 over: Callable[[], bool] | None) -> None:
        self.editor, self.decision, self.stream_id, self.note = editor, decision, stream_id, note
        self.cut, self.wake, self.clock, self.over = cut, wake, clock, over
        self.events = EventStream(editor.edit)
        self.ended = False
        self.timer: asyncio.TimerHandle | None = None
        self.timer_due: float | None = None
        if wake is not None:
            soon = wake

            def request_tick() -> None:
                asyncio.get_running_loop().call_soon(soon)

            editor.request_tick = request_tick

    def __call__(self, data: bytes) -> list[bytes]:
        if self.ended or (self.over is not None and self.over()):
            raw = [data] if data and data is not TICK else []
            if self.ended:
                return raw
            self.ended = True
            self._set_timer(None)
            return self._end_edits(raw)
        editor = self.editor
        try:
            out = editor.tick() if data is TICK else self.events.feed(data) if data else \
                self.events.end() + editor.at_end()
        except Exception:  # never let an edit break the stream: pass the chunk on
            log.exception("watch edit failed; passing the chunk through")
            return [data] if data and data is not TICK else []
        self._journal()
        if editor.cut_connection:
            editor.cut_connection = False
            asyncio.get_running_loop().call_soon(self.cut)
        if self.wake is not None and data:
            self._set_timer(editor.next_due())
        elif not data:
            self._set_timer(None)
        return out

    def _journal(self) -> None:
        """Each edit the editor made, as a `watch-event`."""
        for record in self.editor.records:
            self.note("watch-event", **self.decision.stamp(), stream=self.stream_id, **record)
        self.editor.records.clear()

    def _set_timer(self, due: float | None) -> None:
        """A tick at `due` (monotonic seconds; None: none), replacing the one set before if it differs."""
        if due == self.timer_due:
            return
        if self.timer is not None:
            self.timer.cancel()
        self.timer, self.timer_due = None, due
        if due is not None:
            self.timer = asyncio.get_running_loop().call_later(max(0.0, due - self.clock()), self._fire)

    def _fire(self) -> None:
        self.timer, self.timer_due = None, None
        if self.wake is not None:
            self.wake()

    def _end_edits(self, raw: list[bytes]) -> list[bytes]:
        """The edits end: what the editor keeps back, then a part line the stream holds, then the chunk as sent."""
        try:
            out = self.editor.release()
        except Exception:  # never let an edit break the stream
            log.exception("watch edit failed to release; passing the rest through")
            out = []
        self._journal()
        self.note("watch-edits-end", **self.decision.stamp(), stream=self.stream_id, reason="activation over",
                  released=len(out))
        return out + self.events.end() + raw


class WatchEdits:
    """Streams the watches a fault edits through its editor; `note` journals (the counters' own)."""

    def __init__(self, note: Callable[..., None], signals: WatchSignals, activations: Activations) -> None:
        self.note = note
        self.signals = signals
        self.activations = activations
        self.live: dict[str, tuple[int, Callable[[], bool]]] = {}  # edited streams: flow id -> (epoch, wake)
        activations.on_end.append(self._activation_over)

    def _activation_over(self, epoch: int) -> None:
        """Wake every watch the activation edited, so each releases what it keeps back now, not at its next event,
        and forget them (a watch ended earlier stays listed until then: one entry per edited watch)."""
        for flow_id, (of, wake) in list(self.live.items()):
            if of == epoch:
                del self.live[flow_id]
                wake()  # False: it no longer streams, or ticks are off (it releases at its next chunk then)

    def _over(self, epoch: int) -> bool:
        """Whether the activation of that epoch is over."""
        active = self.activations.active
        return active is None or active.engine.epoch != epoch

    def request(self, flow: http.HTTPFlow) -> None:
        decision: Decision | None = flow.metadata.get(DECISION)
        if decision is None or flow.response or flow.error or not flow.live:
            return
        for step in decision.plan.before:
            if isinstance(step, EditEvents):
                flow.metadata[EDITOR] = step.editor
                self._ask_json(flow, decision)
                self._ask_uncompressed(flow, decision)

    def _ask_json(self, flow: http.HTTPFlow, decision: Decision) -> None:
        """An edited watch is asked for in JSON, the one form the editor reads, when the client accepts JSON too
        (client-go's protobuf clients do: the apiserver answers CRDs in JSON to them); journaled."""
        accept = flow.request.headers.get("accept", "")
        wanted = json_accept(accept)
        if wanted is not None and wanted != accept:
            flow.request.headers["accept"] = wanted
            self.note("watch-as-json", **decision.stamp(), request=flow.metadata[IDENT].as_dict(), accept=accept)

    def _ask_uncompressed(self, flow: http.HTTPFlow, decision: Decision) -> None:
        """An edited watch is asked for uncompressed, the form the editor reads: a 1.37 apiserver gzips a WatchList's
        stream when the client accepts gzip (`WatchListCompression`), as Go's transport does by itself; journaled.
        The client's transport takes a plain answer as it is."""
        if "accept-encoding" in flow.request.headers:
            accept_encoding = flow.request.headers.get("accept-encoding", "")
            del flow.request.headers["accept-encoding"]
            self.note("watch-uncompressed", **decision.stamp(), request=flow.metadata[IDENT].as_dict(),
                      acceptEncoding=accept_encoding)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        ident: RequestIdentity | None = flow.metadata.get(IDENT)
        editor: EventEditor | None = flow.metadata.get(EDITOR)
        response = flow.response
        if ident is None or editor is None or response is None or not ident.watch or response.status_code != 200:
            return
        decision: Decision = flow.metadata[DECISION]
        headers = response.headers
        ctype, encoding = headers.get("content-type", ""), headers.get("content-encoding", "")
        if not editable(ctype, encoding):
            self.note("watch-unparsable", **decision.stamp(), request=ident.as_dict(), contentType=ctype,
                      contentEncoding=encoding, accept=flow.request.headers.get("accept", ""))
            return
        editor.listen(self.signals)
        client_id = flow.client_conn.id
        wake = functools.partial(stream_ticks.wake, client_id, flow)
        self.live[flow.id] = (decision.epoch, wake)
        response.stream = edited(editor, decision, flow.id, self.note,
                                 functools.partial(internals.close_client_upstream, client_id), wake,
                                 over=functools.partial(self._over, decision.epoch))
