"""The fault addon: it identifies each request, asks the engine for a decision, stamps it in `flow.metadata` and
performs its plain steps (answer, reset, wait, limit a watch, drop the upstream connection)."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence

from mitmproxy import http

from kube_fault_proxy.proxy.engine import Decision
from kube_fault_proxy.proxy.faults.plan import CloseUpstream, LimitWatch, ResetStream, Respond, Step, Wait
from kube_fault_proxy.proxy.mitm.flow_keys import AFTER, DECISION, IDENT
from kube_fault_proxy.proxy.mitm.held import HeldAnswers, wait
from kube_fault_proxy.proxy.mitm.http_parts import header_values, response_of
from kube_fault_proxy.proxy.mitm.in_flight import WritesInFlight
from kube_fault_proxy.proxy.mitm.patches import internals
from kube_fault_proxy.proxy.requests import identity
from kube_fault_proxy.proxy.requests.binding import is_binding_post
from kube_fault_proxy.proxy.requests.identity import WRITES, RequestIdentity
from kube_fault_proxy.proxy.runtime import Runtime
from kube_fault_proxy.proxy.written import written


def _written_body(response: http.Response) -> tuple[str, bytes | None]:
    """An answer's content type and its body, decoded if it has a content encoding."""
    values = header_values(response.headers, b"content-type", b"content-encoding")
    body = response.get_content(strict=False) if values.get(b"content-encoding") else response.raw_content
    return values.get(b"content-type", ""), body


def _identify(req: http.Request, path: str, query: str) -> RequestIdentity:
    """What a request is (its verb, resource, object, client; a Binding's pod and node, read from its body).
    Never raises: an unreadable part is decided as absent."""
    body = req.raw_content if is_binding_post(req.method, path) else None
    headers = header_values(req.headers, b"user-agent", b"content-type", b"accept")
    return identity.parse_untrusted(req.method, path, query, headers.get(b"user-agent", ""), body,
                                    headers.get(b"content-type", ""), headers.get(b"accept", ""))


class FaultAddon:
    """Parses each request, asks the runtime for a decision, stamps it and carries its plain steps out.

    The other jobs are addons of their own around it in the chain (`mitm/server.py`): the connection timeouts,
    an outage's dropping and the stale views' reading of answers before it; an outage's start, the watch edits,
    the stale reads, the late commits, the crash points and the bind accounting after it. It calls none of them:
    what they act on, it stamps under the keys of `flow_keys`.
    """

    def __init__(self, runtime: Runtime, held: HeldAnswers | None = None,
                 in_flight: WritesInFlight | None = None) -> None:
        self.runtime = runtime
        self.held = held if held is not None else HeldAnswers()
        self.in_flight = in_flight  # a reset names the writes it fails in flight
        self.counters = runtime.counters
        self.activations = runtime.activations

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
        if decision.plan.journaled_when_served:  # a stale view: its revision is chosen, and journaled, as it leaves
            return None
        cut = {"inFlight": self.in_flight.cut({flow.client_conn.id})} if self.in_flight is not None and any(
            isinstance(s, CloseUpstream) for s in before) else {}  # read before the reset below fails them
        self.counters.performed(decision, ident, action=decision.plan.describe(), **cut)
        if any(isinstance(s, Wait) for s in before):
            return self._perform(flow, before)
        self._apply(flow, before)
        return None

    def responseheaders(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        ident: RequestIdentity | None = flow.metadata.get(IDENT)
        if ident is None or flow.response is None or not ident.watch:
            return None
        flow.response.stream = True  # the watch edits and the stale views, after it, wrap this
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
        response = flow.response
        if response is None or ident.watch:
            return None
        if decision is None or not decision.plan.before:  # the apiserver's own answer (the stale views read it first)
            self.activations.answered(ident, response.status_code)
        if decision is None or not decision.plan.after:
            return None
        return self._after(flow, response, ident, decision)

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
        obj = written(*_written_body(response)) if 200 <= status < 300 and ident.verb in WRITES else None
        self.counters.performed(decision, ident, action=decision.plan.describe(), upstreamStatus=status,
                                **({"written": obj} if obj else {}))
        after = flow.metadata[AFTER] = decision.plan.after  # a crash point's hold is its addon's, next in line
        if any(isinstance(s, Wait) for s in after):
            return self.held.holding_for(flow, self._perform(flow, after))
        self._apply(flow, after)
        return None

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
                case Respond(reply):
                    flow.response = response_of(reply)
                    return
                case ResetStream():
                    flow.kill()
                    return
                case LimitWatch(seconds):
                    current = flow.request.query.get("timeoutSeconds", "")
                    limit = min(seconds, int(current)) if current.isdigit() else seconds
                    flow.request.query["timeoutSeconds"] = str(limit)
                case CloseUpstream():  # the client's apiserver connections dropped: every stream on them fails
                    internals.close_client_upstream(flow.client_conn.id)
                    flow.kill()
                    return
                case _:
                    pass  # a step of a behaviour with an addon of its own: it reads the decision in its hooks
