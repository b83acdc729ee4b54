"""Stalled watches (`stallStream`) as an addon of their own: a watch's answer goes silent, then ends cleanly.

The fault addon decides and stamps the decision (`flow_keys.DECISION`); `StreamStalls`, after the watch edits in the
chain, reads a `StallAnswer` step there. In `request` it asks a stall that counts events for the answer uncompressed
(journaled `watch-uncompressed`, as the watch edits do). In `responseheaders` it puts the stall's stream callable in
place (the stale views, after it, wrap it: the revision log still reads every byte the apiserver sends). The
silence begins at the Nth event, or on a timer at its time; journaled as a `watch-event` `stalled`. When the window
closes, or the activation ends, the proxy ends the stream itself (`patches/stream_ticks.end`); when the apiserver
ended it during the window, its end is held in the `response` hook until then. A client that resets the stream or
closes the connection ends the stall sooner. Each stall's end is journaled (`stall-end`, with its reason).

A watch no stall was decided for costs one dictionary read per hook: nothing is added to its chunks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from mitmproxy import http

from kube_fault_proxy.proxy.activations import Activations
from kube_fault_proxy.proxy.engine import Decision
from kube_fault_proxy.proxy.faults.plan import StallAnswer
from kube_fault_proxy.proxy.mitm.flow_keys import DECISION, IDENT
from kube_fault_proxy.proxy.mitm.patches import stream_ticks
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.requests.watch import TICK
from kube_fault_proxy.proxy.stalled_streams import StreamStall

log = logging.getLogger(__name__)
POLL_SECONDS = 0.2  # how often a held end looks whether its client is gone


def stall_of(decision: Decision | None) -> StallAnswer | None:
    """The decision's stall of a streamed answer, if it has one."""
    if decision is None:
        return None
    return next((s for s in decision.plan.before if isinstance(s, StallAnswer)), None)


class StalledStream:
    """One stalled watch's stream callable, its timers and the end it may hold."""

    def __init__(self, flow: http.HTTPFlow, decision: Decision, stall: StreamStall, note: Callable[..., None],
                 clock: Callable[[], float], forget: Callable[[str], None]) -> None:
        self.flow, self.decision, self.stall, self.note, self.clock = flow, decision, stall, note, clock
        self.forget = forget
        self.timer: asyncio.TimerHandle | None = None
        self.over = asyncio.Event()  # the stall is over: a held end may go
        self.upstream_ended = False
        if stall.stalled_at is not None:  # silent from the start
            self._began()
        elif stall.due is not None:
            self._at(stall.due, self._start_on_time)

    def __call__(self, data: bytes) -> list[bytes]:
        if data is TICK:
            return []
        if not data:  # the end: the apiserver's (held in `response` while the window lasts) or the proxy's
            self.upstream_ended = not self.stall.ended
            return []
        was = self.stall.stalled_at
        out = self.stall.feed(data, self.clock())
        if was is None and self.stall.stalled_at is not None:
            self._began()
        return out

    def _at(self, when: float, then: Callable[[], None]) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = asyncio.get_running_loop().call_later(max(0.0, when - self.clock()), then)

    def _start_on_time(self) -> None:
        self.timer = None
        if not self.stall.ended and self.stall.start(self.clock()):
            self._began()

    def _began(self) -> None:
        stall = self.stall
        self.note("watch-event", **self.decision.stamp(), stream=self.flow.id, action="stalled",
                  afterEvents=stall.frames.count if stall.step.after_events is not None else None,
                  forSeconds=stall.step.seconds)
        ends_at = stall.ends_at
        assert ends_at is not None
        self._at(ends_at, lambda: self.end("window"))

    def end(self, reason: str) -> None:
        """The stall is over: the stream ends now (or its held end goes); journaled once."""
        stall = self.stall
        if stall.ended:
            return
        stall.ended = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.forget(self.flow.id)
        self.over.set()
        ended_by_proxy = False
        # A stall that had not begun leaves the stream as it is (it passes on as the apiserver sends it); one that
        # had ends it, unless the apiserver's end is the one held, or nobody is there to end it for.
        if stall.stalled_at is not None and not self.upstream_ended and reason != "client-gone":
            ended_by_proxy = stream_ticks.end(self.flow.client_conn.id, self.flow)
        stalled = None if stall.stalled_at is None else round(self.clock() - stall.stalled_at, 3)
        self.note("stall-end", **self.decision.stamp(), stall="stream", stream=self.flow.id, reason=reason,
                  stalledSeconds=stalled, withheldBytes=stall.withheld_bytes,
                  end="proxy" if ended_by_proxy else "apiserver" if self.upstream_ended else "none")

    async def hold_end(self) -> None:
        """The apiserver ended the watch: its end waits for the window (or the client leaving)."""
        if self.stall.stalled_at is None:  # it ended before the silence began: nothing to hold
            self.end("apiserver-ended")
            return
        while not self.over.is_set():
            if not self.flow.client_conn.connected:
                self.end("client-gone")
                return
            try:
                await asyncio.wait_for(self.over.wait(), POLL_SECONDS)
            except TimeoutError:
                continue


class StreamStalls:
    """Silences the watches a `stallStream` rule decided, then ends them; `note` journals (the counters' own)."""

    def __init__(self, note: Callable[..., None], activations: Activations,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.note, self.activations, self.clock = note, activations, clock
        self.live: dict[str, tuple[int, StalledStream]] = {}  # flow id -> (epoch, its stall)
        activations.on_end.append(self._activation_over)

    def _activation_over(self, epoch: int) -> None:
        """Every stall of that activation ends now (its stream ends cleanly)."""
        for of, stalled in list(self.live.values()):
            if of == epoch:
                stalled.end("deactivated")

    def request(self, flow: http.HTTPFlow) -> None:
        step = stall_of(flow.metadata.get(DECISION))
        if step is None or step.after_events is None or flow.response or flow.error or not flow.live:
            return
        if "accept-encoding" in flow.request.headers:  # events are counted in the bytes: ask for them uncompressed
            accept_encoding = flow.request.headers.get("accept-encoding", "")
            del flow.request.headers["accept-encoding"]
            decision: Decision = flow.metadata[DECISION]
            self.note("watch-uncompressed", **decision.stamp(), request=flow.metadata[IDENT].as_dict(),
                      acceptEncoding=accept_encoding)

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        decision: Decision | None = flow.metadata.get(DECISION)
        step = stall_of(decision)
        ident: RequestIdentity | None = flow.metadata.get(IDENT)
        response = flow.response
        if step is None or decision is None or ident is None or response is None or not ident.watch \
                or response.status_code != 200:
            return
        stall = StreamStall(step, response.headers.get("content-type", ""), self.clock())
        stalled = StalledStream(flow, decision, stall, self.note, self.clock, self._forget)
        self.live[flow.id] = (decision.epoch, stalled)
        response.stream = stalled

    def _forget(self, flow_id: str) -> None:
        self.live.pop(flow_id, None)

    def response(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        entry = self.live.get(flow.id)
        if entry is None:
            return None
        return entry[1].hold_end()

    def error(self, flow: http.HTTPFlow) -> None:
        entry = self.live.get(flow.id)
        if entry is not None:  # the client reset the stream or left (or the upstream failed): the stall is over
            entry[1].end("client-gone")
