"""The fault addon: the only code that touches flows; it performs the engine's decisions."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Sequence

import httpx
from mitmproxy import http

from kube_fault_proxy.proxy.engine import Decision
from kube_fault_proxy.proxy.faults.plan import (
    CloseUpstream,
    EditEvents,
    LimitWatch,
    ResetStream,
    Respond,
    ServeStale,
    Step,
    Wait,
)
from kube_fault_proxy.proxy.mitm import watch_edits
from kube_fault_proxy.proxy.mitm.flow_keys import AFTER, DECISION, EDITOR, IDENT, INITIAL, STALE
from kube_fault_proxy.proxy.mitm.held import HeldAnswers, wait
from kube_fault_proxy.proxy.mitm.own_client import own_client
from kube_fault_proxy.proxy.mitm.patches import internals, stream_ticks
from kube_fault_proxy.proxy.requests import identity
from kube_fault_proxy.proxy.requests.binding import is_binding_post
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.requests.status import Reply
from kube_fault_proxy.proxy.requests.watch import EventEditor
from kube_fault_proxy.proxy.runtime import Runtime
from kube_fault_proxy.proxy.stale_views import WRITES, Answer, Served, StaleViews
from kube_fault_proxy.proxy.written import written

WAKE_TRIES, WAKE_RETRY_SECONDS = 50, 0.02


def _header_values(headers: http.Headers, *names: bytes) -> dict[bytes, str]:
    """The values of the named (lower-case) header fields present, read as mitmproxy's Headers read them
    (case-insensitive names, several fields folded with ", ", undecodable bytes kept as surrogates), in
    one pass over the fields: a `headers.get(...)` or `in headers` walks them all each time (~2 µs)."""
    found: dict[bytes, list[bytes]] = {}
    for name, value in headers.fields:
        name = name.lower()
        if name in names:
            found.setdefault(name, []).append(value)
    return {name: ", ".join(v.decode("utf-8", "surrogateescape") for v in values) for name, values in found.items()}


def _answer(response: http.Response, decoded: bool = False) -> Answer:
    """What the apiserver answered, as the stale views read it (the body decoded only when asked)."""
    values = _header_values(response.headers, b"content-type", b"content-encoding")
    encoding = values.get(b"content-encoding", "")
    body = response.get_content(strict=False) if decoded and encoding else response.raw_content
    return Answer(response.status_code, values.get(b"content-type", ""), "" if decoded else encoding, body)


def _identify(req: http.Request, path: str, query: str) -> RequestIdentity:
    """What a request is (its verb, resource, object, client; a Binding's pod and node, read from its body).
    Never raises: an unreadable part is decided as absent."""
    body = req.raw_content if is_binding_post(req.method, path) else None
    headers = _header_values(req.headers, b"user-agent", b"content-type", b"accept")
    return identity.parse_untrusted(req.method, path, query, headers.get(b"user-agent", ""), body,
                                    headers.get(b"content-type", ""), headers.get(b"accept", ""))


def _make_response(step: Respond) -> http.Response:
    reply = step.reply
    headers = [(k.encode(), v.encode()) for k, v in reply.headers]
    return http.Response.make(reply.status, reply.body, headers)


class FaultAddon:
    """Parses each request, asks the runtime for a decision and carries it out.

    The other jobs are addons of their own around it in the chain (`mitm/server.py`): the connection timeouts
    and an outage's dropping before it, the bind accounting after it (so it sees the answer a fault left). It
    calls none of them: what they act on, it stamps under the keys of `flow_keys`.
    """

    def __init__(self, runtime: Runtime, held: HeldAnswers | None = None, stale: StaleViews | None = None) -> None:
        self.runtime = runtime
        self.held = held if held is not None else HeldAnswers()
        self.counters = runtime.counters
        self.activations = runtime.activations
        self.stale = stale if stale is not None else StaleViews(runtime.counters, runtime.clock)
        self._upstream_client: httpx.AsyncClient | None = None

    def _client(self) -> httpx.AsyncClient:
        """The proxy's own client of the apiserver (a stale WatchList's LIST), made on first use."""
        if self._upstream_client is None:
            self._upstream_client = own_client()
        return self._upstream_client

    async def _stale_watch(self, flow: http.HTTPFlow, ident: RequestIdentity, decision: Decision, step: ServeStale,
                           path: str) -> None:
        """A WatchList from a past revision: its initial events read now, the watch from that revision sent."""
        req = flow.request
        auth = req.headers.get("authorization")

        async def get(target: str) -> tuple[int, str, bytes]:
            headers = {"accept": "application/json", **({"authorization": auth} if auth else {})}
            answer = await self._client().get(target, headers=headers)
            return answer.status_code, answer.headers.get("content-type", ""), answer.content

        try:
            served = await self.stale.serve_watch(ident, decision, step, path, list(req.query.items(multi=True)), get)
        except httpx.HTTPError as e:
            self.counters.note("stale-refused", **decision.stamp(), request=ident.as_dict(),
                               error=f"{type(e).__name__}: {e}")
            return
        if isinstance(served, Reply):
            flow.response = _make_response(Respond(served))  # the apiserver's own refusal (410: compacted)
        elif served is not None:
            req.path = served.path
            req.headers["accept"] = "application/json"  # the initial events are JSON: so is the rest
            req.headers.pop("accept-encoding", None)  # and plain: they go first, before the watch's own bytes
            flow.metadata[INITIAL] = served.initial

    def _wake(self, flow: http.HTTPFlow, tries: int) -> None:
        """Have the flow's stream callable called soon, once it streams (retried while it does not yet)."""
        loop = asyncio.get_running_loop()

        def attempt(left: int) -> None:
            if not stream_ticks.wake(flow.client_conn.id, flow) and left > 0 and flow.live:
                loop.call_later(WAKE_RETRY_SECONDS, attempt, left - 1)

        loop.call_soon(attempt, tries)

    async def done(self) -> None:
        if self._upstream_client is not None:
            await self._upstream_client.aclose()

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        if flow.response or flow.error or not flow.live:
            return None
        path, _, query = flow.request.path.partition("?")
        ident = flow.metadata[IDENT] = _identify(flow.request, path, query)
        decision = self.runtime.decide(ident)
        if decision is None:
            return None
        flow.metadata[DECISION] = decision
        before = decision.plan.before
        if not before:
            return None  # only after-steps: performed and journaled once upstream answers
        if isinstance(before[0], ServeStale):  # its revision is chosen, and journaled, as it leaves
            return self._serve_stale(flow, ident, decision, before[0], path)
        self.counters.performed(decision, ident, action=decision.plan.describe())
        if any(isinstance(s, Wait) for s in before):
            return self._perform(flow, before)
        self._apply(flow, before)
        return None

    def _serve_stale(self, flow: http.HTTPFlow, ident: RequestIdentity, decision: Decision, step: ServeStale,
                     path: str) -> Awaitable[None] | None:
        """A stale view: a LIST or GET sent on to the apiserver at a past revision (the answer checked in
        `response`), a WatchList from a past revision (its initial state read first)."""
        if ident.watch:
            return self._stale_watch(flow, ident, decision, step, path)
        req = flow.request
        served = self.stale.serve(ident, decision, step, path, list(req.query.items(multi=True)))
        if served is not None:
            req.path = served.path
            if served.accept is not None:
                req.headers["accept"] = served.accept
            flow.metadata[STALE] = served
        return None

    def responseheaders(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        ident: RequestIdentity | None = flow.metadata.get(IDENT)
        if ident is None or flow.response is None or not ident.watch:
            return None
        flow.response.stream = True
        editor: EventEditor | None = flow.metadata.get(EDITOR)
        if editor is not None and flow.response.status_code == 200:
            self._edit_stream(flow, ident, editor)
        noted = self.stale.watch(ident, _answer(flow.response), flow.response.stream, editor)
        if noted is not None:
            flow.response.stream = noted
        initial: bytes | None = flow.metadata.pop(INITIAL, None)
        if initial is not None and flow.response.status_code == 200:  # before the watch's own, unscanned
            flow.response.stream = watch_edits.prefixed(initial, flow.response.stream)
            self._wake(flow, WAKE_TRIES)
        decision: Decision | None = flow.metadata.get(DECISION)
        if decision is not None and decision.plan.after:
            # A streamed watch has no end to wait for: only waits apply, at its start.
            waits = [s for s in decision.plan.after if isinstance(s, Wait)]
            self.counters.performed(decision, ident, action=decision.plan.describe())
            return self._perform(flow, waits)
        return None

    def response(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        ident: RequestIdentity | None = flow.metadata.get(IDENT)
        if ident is None:
            return None  # its request hook skipped it (already answered or killed): nothing to count or perform
        decision: Decision | None = flow.metadata.get(DECISION)
        if not ident.watch and flow.response is not None:
            self._answered(flow, flow.response, ident, decision)
        if decision is None or not decision.plan.after or flow.response is None or ident.watch:
            return None
        return self._after(flow, flow.response, ident, decision)

    def _answered(self, flow: http.HTTPFlow, response: http.Response, ident: RequestIdentity,
                  decision: Decision | None) -> None:
        """The apiserver answered a request (not a watch): the stale views check a stale read's answer and
        note every write's revision; the activations hear answers the apiserver gave itself."""
        served: Served | None = flow.metadata.get(STALE)
        reply = self.stale.answered(ident, _answer(response, served is not None), served)
        if reply is not None:
            flow.response = response = _make_response(Respond(reply))
        if decision is None or not decision.plan.before:  # the apiserver's own answer
            self.activations.answered(ident, response.status_code)

    def _after(self, flow: http.HTTPFlow, response: http.Response, ident: RequestIdentity,
               decision: Decision) -> Awaitable[None] | None:
        """The decision's after-steps on the apiserver's answer (or none, when they need a commit there was
        not)."""
        status = response.status_code
        if decision.plan.after_only_if_committed and not 200 <= status < 300:
            # Nothing was committed (a 429, a 409, an apiserver timeout): the client must see that
            # answer, not a made-up failure of a write that never happened. The rule's turn is spent.
            self.counters.note("commit-skipped", **decision.stamp(), request=ident.as_dict(), upstreamStatus=status)
            if decision.plan.refund_if_not_committed:  # a crash point waits for a write that commits
                self.activations.refund(decision, ident)
            return None
        got = _answer(response, decoded=True)
        obj = written(got.content_type, got.body) if 200 <= status < 300 and ident.verb in WRITES else None
        self.counters.performed(decision, ident, action=decision.plan.describe(), upstreamStatus=status,
                                **({"written": obj} if obj else {}))
        after = flow.metadata[AFTER] = decision.plan.after  # a crash point's hold is its addon's, next in line
        if any(isinstance(s, Wait) for s in after):
            return self.held.holding_for(flow, self._perform(flow, after))
        self._apply(flow, after)
        return None

    def _edit_stream(self, flow: http.HTTPFlow, ident: RequestIdentity, editor: EventEditor) -> None:
        """Stream the watch through the editor, one whole event at a time (if it can read the body)."""
        assert flow.response is not None
        headers = flow.response.headers
        decision: Decision = flow.metadata[DECISION]
        ctype, encoding = headers.get("content-type", ""), headers.get("content-encoding", "")
        if not watch_edits.editable(ctype, encoding):
            self.counters.note("watch-unparsable", **decision.stamp(), request=ident.as_dict(),
                               contentType=ctype, contentEncoding=encoding,
                               accept=flow.request.headers.get("accept", ""))
            return
        editor.listen(self.stale.signals)
        flow.response.stream = watch_edits.edited(editor, decision, flow.id, self.counters.note,
                                                  functools.partial(self._close_upstream, flow),
                                                  functools.partial(stream_ticks.wake, flow.client_conn.id, flow))

    def _ask_json(self, flow: http.HTTPFlow) -> None:
        """An edited watch is asked for in JSON, the one form the editor reads, when the client accepts JSON too
        (client-go's protobuf clients do: the apiserver answers CRDs in JSON to them); journaled."""
        accept = flow.request.headers.get("accept", "")
        wanted = watch_edits.json_accept(accept)
        if wanted is not None and wanted != accept:
            flow.request.headers["accept"] = wanted
            self.counters.note("watch-as-json", **flow.metadata[DECISION].stamp(),
                               request=flow.metadata[IDENT].as_dict(), accept=accept)

    def _ask_uncompressed(self, flow: http.HTTPFlow) -> None:
        """An edited watch is asked for uncompressed, the form the editor reads: a 1.37 apiserver gzips a WatchList's
        stream when the client accepts gzip (`WatchListCompression`), as Go's transport does by itself; journaled.
        The client's transport takes a plain answer as it is."""
        if "accept-encoding" in flow.request.headers:
            accept_encoding = flow.request.headers.get("accept-encoding", "")
            del flow.request.headers["accept-encoding"]
            self.counters.note("watch-uncompressed", **flow.metadata[DECISION].stamp(),
                               request=flow.metadata[IDENT].as_dict(), acceptEncoding=accept_encoding)

    @staticmethod
    def _close_upstream(flow: http.HTTPFlow) -> None:
        """Drop the client's apiserver connection(s): every stream on them fails (an apiserver restart).

        Not just `flow.server_conn`: upstream connections open lazily, so a request decided in its
        `request` hook has no upstream connection of its own yet; the one it would use is the
        client's existing one."""
        handler = internals.handler(internals.proxyserver(), flow.client_conn.id)
        if handler is not None:
            internals.close_upstream(handler)

    async def _perform(self, flow: http.HTTPFlow, steps: Sequence[Step]) -> None:
        for i, step in enumerate(steps):
            if isinstance(step, Wait):
                if not await wait(flow, step.seconds, step.until_client_gone):
                    return  # the client is gone: nothing left to answer
            else:
                self._apply(flow, steps[i:])
                break

    def _apply(self, flow: http.HTTPFlow, steps: Sequence[Step]) -> None:
        for step in steps:
            match step:
                case Respond():
                    flow.response = _make_response(step)
                    return
                case ResetStream():
                    flow.kill()
                    return
                case LimitWatch(seconds):
                    current = flow.request.query.get("timeoutSeconds", "")
                    limit = min(seconds, int(current)) if current.isdigit() else seconds
                    flow.request.query["timeoutSeconds"] = str(limit)
                case EditEvents(editor):
                    flow.metadata[EDITOR] = editor
                    self._ask_json(flow)
                    self._ask_uncompressed(flow)
                case CloseUpstream():
                    self._close_upstream(flow)
                    flow.kill()
                    return
                case _:
                    pass  # a step of a behaviour with an addon of its own: it reads the decision in its hooks
