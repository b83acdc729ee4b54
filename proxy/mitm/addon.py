"""The fault addon: the only code that touches flows; it performs the engine's decisions."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Sequence

from mitmproxy import http

from proxy import identity
from proxy.engine import Decision
from proxy.faults.plan import Reset, Respond, Step, Wait
from proxy.identity import RequestIdentity
from proxy.runtime import Runtime

log = logging.getLogger(__name__)
IDENT = "kfp.identity"
DECISION = "kfp.decision"
POLL_SECONDS = 0.2


def _make_response(step: Respond) -> http.Response:
    reply = step.reply
    headers = [(k.encode(), v.encode()) for k, v in reply.headers]
    return http.Response.make(reply.status, reply.body, headers)


async def _wait(flow: http.HTTPFlow, step: Wait) -> bool:
    """Sleep without blocking other requests; False when the client left meanwhile."""
    if not step.until_client_gone:
        await asyncio.sleep(step.seconds)
        return flow.client_conn.connected
    loop = asyncio.get_running_loop()
    deadline = loop.time() + step.seconds
    while (left := deadline - loop.time()) > 0:
        if not flow.client_conn.connected or flow.error is not None:
            return False
        await asyncio.sleep(min(POLL_SECONDS, left))
    return flow.client_conn.connected


class FaultAddon:
    """Parses each request, asks the runtime for a decision and carries it out."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        if flow.response or flow.error or not flow.live:
            return None
        req = flow.request
        path, _, query = req.path.partition("?")
        body = req.raw_content if req.method == "POST" and path.endswith("/binding") else None
        ident = identity.parse(
            req.method,
            path,
            query,
            req.headers.get("user-agent", ""),
            body,
            req.headers.get("content-type", ""),
        )
        flow.metadata[IDENT] = ident
        decision = self.runtime.decide(ident)
        if decision is None:
            return None
        flow.metadata[DECISION] = decision
        before = decision.plan.before
        if not before:
            return None  # only after-steps: performed and journaled once upstream answers
        self.runtime.performed(decision, ident, action=decision.plan.describe())
        if any(isinstance(s, Wait) for s in before):
            return self._perform(flow, before)
        self._apply(flow, before)
        return None

    def responseheaders(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        ident: RequestIdentity | None = flow.metadata.get(IDENT)
        if ident is None or flow.response is None or not ident.watch:
            return None
        flow.response.stream = True
        decision: Decision | None = flow.metadata.get(DECISION)
        if decision is not None and decision.plan.after:
            # A streamed watch has no end to wait for: only waits apply, at its start.
            waits = [s for s in decision.plan.after if isinstance(s, Wait)]
            self.runtime.performed(decision, ident, action=decision.plan.describe())
            return self._perform(flow, waits)
        return None

    def response(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        decision: Decision | None = flow.metadata.get(DECISION)
        if decision is None or not decision.plan.after or flow.response is None:
            return None
        ident: RequestIdentity = flow.metadata[IDENT]
        if ident.watch:
            return None
        self.runtime.performed(
            decision, ident, action=decision.plan.describe(), upstreamStatus=flow.response.status_code
        )
        after = decision.plan.after
        if any(isinstance(s, Wait) for s in after):
            return self._perform(flow, after)
        self._apply(flow, after)
        return None

    async def _perform(self, flow: http.HTTPFlow, steps: Sequence[Step]) -> None:
        for i, step in enumerate(steps):
            if isinstance(step, Wait):
                if not await _wait(flow, step):
                    return  # the client is gone: nothing left to answer
            else:
                self._apply(flow, steps[i:])
                return

    @staticmethod
    def _apply(flow: http.HTTPFlow, steps: Sequence[Step]) -> None:
        for step in steps:
            if isinstance(step, Respond):
                flow.response = _make_response(step)
                return
            if isinstance(step, Reset):
                flow.kill()
                return
