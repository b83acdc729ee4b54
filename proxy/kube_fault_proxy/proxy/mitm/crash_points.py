"""Crash points: a committed answer held, then relayed or dropped (`crashPoint`), as an addon of its own; the
`crash-point` record names the components to kill when the rule lists them (`kill`).

The fault addon decides and journals the crash point, and once the apiserver's answer allows its after-steps
(a 2xx: something was committed) stamps them under `flow_keys.AFTER`; this addon, next in the chain, holds the
answer in its own `response` hook. The hold is counted as held for its client (`HeldAnswers`), so an upstream
connection lost meanwhile drains the client rather than dropping the answer; the bind accounting, after it in
the chain, sees the answer once the hold ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from mitmproxy import http

from kube_fault_proxy.proxy.engine import Decision
from kube_fault_proxy.proxy.faults.plan import HoldAnswer, Step
from kube_fault_proxy.proxy.mitm.flow_keys import AFTER, DECISION, IDENT
from kube_fault_proxy.proxy.mitm.held import HeldAnswers, wait
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.revisions import first_revision


class CrashPoints:
    """Holds the committed answers a crash point stops at; `note` journals (the counters' own)."""

    def __init__(self, note: Callable[..., None], held: HeldAnswers) -> None:
        self.note = note
        self.held = held

    def response(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        after: Sequence[Step] | None = flow.metadata.get(AFTER)
        if not after or not isinstance(after[0], HoldAnswer) or flow.response is None:
            return None
        decision: Decision = flow.metadata[DECISION]
        ident: RequestIdentity = flow.metadata[IDENT]
        return self.held.holding_for(flow, self._hold(flow, after[0].seconds, after[0].kill, **decision.stamp(),
                                                      request=ident.as_dict()))

    async def _hold(self, flow: http.HTTPFlow, seconds: float, kill: tuple[tuple[str, float], ...],
                    **stamp: Any) -> None:
        """The committed answer held for `seconds` (`crash-point`, when it is held), then relayed, or dropped if
        its client went meanwhile (`crash-point-released`, either way)."""
        response = flow.response
        assert response is not None
        status = response.status_code
        body = response.raw_content or b""
        revision = None if "content-encoding" in response.headers else first_revision(body)
        self.note("crash-point", **stamp, upstreamStatus=status,
                  resourceVersion=None if revision is None else str(revision), holdSeconds=seconds,
                  **({"kill": [{"component": c, "restartAfterSeconds": s} for c, s in kill]} if kill else {}))
        loop = asyncio.get_running_loop()
        began = loop.time()
        relayed = await wait(flow, seconds, until_client_gone=True)
        if not relayed:
            flow.kill()  # nobody is left to read it
        self.note("crash-point-released", **stamp, upstreamStatus=status,
                  outcome="relayed" if relayed else "dropped", heldSeconds=round(loop.time() - began, 3))
