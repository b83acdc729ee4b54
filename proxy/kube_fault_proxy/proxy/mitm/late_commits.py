"""Late commits (failThenCommit) as an addon of its own: writes the proxy sends to the apiserver itself, later than
their client was answered.

The fault addon decides, journals and answers the client (an error, or a reset); this addon, after it in the
chain, reads the decision from `flow.metadata` in the same `request` hook and schedules the write: sent once,
`seconds` after its client got its error, with the client's method, path, headers and body, over a client of the
proxy's own (`own_client`: the upstream identity every forwarded request uses), and journaled as `late-commit`
with the apiserver's status: committed (2xx) or refused. Its answer goes to `observed` (the revision log counts
the write, as it counts any answer the proxy sees), and a committed write's path to `committed` (a Binding's ends
its pod's bind latency).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
from mitmproxy import http

from kube_fault_proxy.proxy.counters import Counters
from kube_fault_proxy.proxy.engine import Decision
from kube_fault_proxy.proxy.faults.plan import CommitLater
from kube_fault_proxy.proxy.mitm.flow_keys import DECISION, IDENT
from kube_fault_proxy.proxy.mitm.own_client import own_client
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.revisions import first_revision
from kube_fault_proxy.proxy.written import written

# Hop-by-hop and framing headers are the new connection's own; an encoded answer could not be read.
DROPPED = frozenset({"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade",
                     "proxy-connection", "accept-encoding"})
Observed = Callable[[RequestIdentity, int, str, bytes], None]  # ident, status, content type, body


class LateCommits:
    """The writes waiting to be sent; each one's task is kept until it ends."""

    def __init__(self, counters: Counters, observed: Observed,
                 client: Callable[[], httpx.AsyncClient] = own_client,
                 committed: Callable[[str], object] = lambda path: None) -> None:
        self.counters = counters
        self.observed = observed
        self.committed = committed  # a committed write's path, without its query (a Binding's ends its latency)
        self._client_factory = client
        self._client: httpx.AsyncClient | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def request(self, flow: http.HTTPFlow) -> None:
        decision: Decision | None = flow.metadata.get(DECISION)
        if decision is None:
            return
        for step in decision.plan.before:
            if isinstance(step, CommitLater):
                req = flow.request
                self.schedule(decision, flow.metadata[IDENT], req.method, req.path,
                              list(req.headers.items(multi=True)), req.raw_content or b"", step.seconds)

    def schedule(self, decision: Decision, ident: RequestIdentity, method: str, path: str,
                 headers: list[tuple[str, str]], body: bytes, seconds: float) -> None:
        """Send the write `seconds` from now (from the running loop)."""
        kept = [(k, v) for k, v in headers if k.lower() not in DROPPED and not k.startswith(":")]
        task = asyncio.get_running_loop().create_task(
            self._send(decision, ident, method, path, kept, body, seconds), name="late-commit")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _send(self, decision: Decision, ident: RequestIdentity, method: str, path: str,
                    headers: list[tuple[str, str]], body: bytes, seconds: float) -> None:
        await asyncio.sleep(seconds)
        if self._client is None:
            self._client = self._client_factory()
        where: dict[str, Any] = {**decision.stamp(), "request": ident.as_dict(), "afterSeconds": seconds}
        try:
            answer = await self._client.request(method, path, headers=headers, content=body)
        except httpx.HTTPError as e:
            self.counters.note("late-commit", **where, committed=False, error=f"{type(e).__name__}: {e}")
            return
        ctype = answer.headers.get("content-type", "")
        revision = first_revision(answer.content) if ctype.startswith("application/json") else None
        committed = 200 <= answer.status_code < 300
        obj = written(ctype, answer.content) if committed else None
        self.counters.note("late-commit", **where, committed=committed, upstreamStatus=answer.status_code,
                           resourceVersion=None if revision is None else str(revision),
                           **({"written": obj} if obj else {}))
        self.observed(ident, answer.status_code, ctype, answer.content)
        if committed:
            self.committed(path.partition("?")[0])

    async def done(self) -> None:
        """Cancel what has not been sent; close the client of its own."""
        for task in list(self.tasks):
            task.cancel()
        if self._client is not None:
            await self._client.aclose()
