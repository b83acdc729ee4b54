"""Stale views (`staleList`, `twoViews`) as addons of their own: reads served at a past revision, and the revision
log they are chosen from, fed by every answer and watch the proxy relays.

The fault addon decides and stamps the decision (`flow_keys.DECISION`). `StaleReads`, after it in the chain, reads
a `ServeStale` step there in its own `request` hook (or a `PinView`: the client connection pinned to one of two
views, whose lag, if it has one, is served the same way): a LIST or GET is sent on at the revision the log chooses
(journaled as it leaves, with the revision served), a WatchList gets its initial events read first over the
proxy's own client. In `responseheaders` it wraps every watch's stream, after the watch edits wrapped theirs, with
the scan that feeds the log (the apiserver's bytes, before any edit), and sends a stale WatchList's initial events
first. `StaleAnswers`, before the fault addon, reads every other answer in `response`: its revision goes into the
log before a fault replaces or holds the answer, and a stale read's answer is checked (a GET's object in place of
the LIST). Both share the plain `StaleViews` that `mitm/server.py` makes; neither calls another addon.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

import httpx
from mitmproxy import http

from kube_fault_proxy.proxy.engine import Decision
from kube_fault_proxy.proxy.faults.plan import PinView, ServeStale
from kube_fault_proxy.proxy.mitm.flow_keys import DECISION, EDITOR, IDENT, INITIAL, STALE
from kube_fault_proxy.proxy.mitm.http_parts import header_values, response_of
from kube_fault_proxy.proxy.mitm.own_client import own_client
from kube_fault_proxy.proxy.mitm.patches import stream_ticks
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.requests.status import Reply
from kube_fault_proxy.proxy.requests.watch import TICK
from kube_fault_proxy.proxy.stale_views import Answer, Served, StaleViews

WAKE_TRIES, WAKE_RETRY_SECONDS = 50, 0.02
Chunks = Callable[[bytes], list[bytes]]  # mitmproxy's stream callable: b"" marks the end


def answer_of(response: http.Response, decoded: bool = False) -> Answer:
    """What the apiserver answered, as the stale views read it (the body decoded only when asked)."""
    values = header_values(response.headers, b"content-type", b"content-encoding")
    encoding = values.get(b"content-encoding", "")
    body = response.get_content(strict=False) if decoded and encoding else response.raw_content
    return Answer(response.status_code, values.get(b"content-type", ""), "" if decoded else encoding, body)


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


def _wake(flow: http.HTTPFlow, tries: int) -> None:
    """Have the flow's stream callable called soon, once it streams (retried while it does not yet)."""
    loop = asyncio.get_running_loop()

    def attempt(left: int) -> None:
        if not stream_ticks.wake(flow.client_conn.id, flow) and left > 0 and flow.live:
            loop.call_later(WAKE_RETRY_SECONDS, attempt, left - 1)

    loop.call_soon(attempt, tries)


class StaleAnswers:
    """Before the fault addon: each answer (not a watch) read into the revision log, a stale read's checked."""

    def __init__(self, views: StaleViews) -> None:
        self.views = views

    def response(self, flow: http.HTTPFlow) -> None:
        ident: RequestIdentity | None = flow.metadata.get(IDENT)
        response = flow.response
        if ident is None or ident.watch or response is None:
            return  # its request was never identified (answered or killed before the fault addon), or it streams
        served: Served | None = flow.metadata.get(STALE)
        reply = self.views.answered(ident, answer_of(response, served is not None), served)
        if reply is not None:
            flow.response = response_of(reply)


class StaleReads:
    """After the fault addon: a `staleList` decision served, and every watch's revisions read as it streams."""

    def __init__(self, views: StaleViews, client: Callable[[], httpx.AsyncClient] = own_client) -> None:
        self.views = views
        self._client_factory = client
        self._client: httpx.AsyncClient | None = None  # the proxy's own client (a WatchList's LIST), made on first use

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        decision: Decision | None = flow.metadata.get(DECISION)
        if decision is None or flow.response or flow.error or not flow.live:
            return None
        found = next((s for s in decision.plan.before if isinstance(s, ServeStale | PinView)), None)
        if found is None:
            return None
        ident: RequestIdentity = flow.metadata[IDENT]
        view: dict[str, object] | None = None
        if isinstance(found, PinView):  # twoViews: the lag of the view this client connection is pinned to
            conn = flow.client_conn
            peer = f"{conn.peername[0]}:{conn.peername[1]}" if conn.peername else ""
            step, view = self.views.pin(ident, decision, found, conn.id, peer)
            if step is None:
                return None  # the current view: the apiserver's own answer
        else:
            step = found
        path = flow.request.path.partition("?")[0]
        if ident.watch:
            return self._serve_watch(flow, ident, decision, step, path, view)
        req = flow.request
        served = self.views.serve(ident, decision, step, path, list(req.query.items(multi=True)), view)
        if served is not None:
            req.path = served.path
            if served.accept is not None:
                req.headers["accept"] = served.accept
            flow.metadata[STALE] = served
        return None

    async def _serve_watch(self, flow: http.HTTPFlow, ident: RequestIdentity, decision: Decision, step: ServeStale,
                           path: str, view: dict[str, object] | None) -> None:
        """A WatchList from a past revision: its initial events read now, the watch from that revision sent."""
        req = flow.request
        auth = req.headers.get("authorization")

        async def get(target: str) -> tuple[int, str, bytes]:
            if self._client is None:
                self._client = self._client_factory()
            headers = {"accept": "application/json", **({"authorization": auth} if auth else {})}
            answer = await self._client.get(target, headers=headers)
            return answer.status_code, answer.headers.get("content-type", ""), answer.content

        try:
            served = await self.views.serve_watch(ident, decision, step, path, list(req.query.items(multi=True)), get,
                                                  view)
        except httpx.HTTPError as e:
            self.views.counters.note("stale-refused", **decision.stamp(), request=ident.as_dict(),
                                     error=f"{type(e).__name__}: {e}", **(view or {}))
            return
        if isinstance(served, Reply):
            flow.response = response_of(served)  # the apiserver's own refusal (410: compacted)
        elif served is not None:
            req.path = served.path
            req.headers["accept"] = "application/json"  # the initial events are JSON: so is the rest
            req.headers.pop("accept-encoding", None)  # and plain: they go first, before the watch's own bytes
            flow.metadata[INITIAL] = served.initial

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        ident: RequestIdentity | None = flow.metadata.get(IDENT)
        response = flow.response
        if ident is None or response is None or not ident.watch:
            return
        noted = self.views.watch(ident, answer_of(response), response.stream, flow.metadata.get(EDITOR))
        if noted is not None:
            response.stream = noted
        initial: bytes | None = flow.metadata.pop(INITIAL, None)
        if initial is not None and response.status_code == 200:  # before the watch's own, unscanned
            response.stream = prefixed(initial, response.stream)
            _wake(flow, WAKE_TRIES)

    async def done(self) -> None:
        if self._client is not None:
            await self._client.aclose()
