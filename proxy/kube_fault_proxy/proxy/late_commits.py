"""Writes the proxy sends to the apiserver itself, later than their client was answered (failThenCommit).

Each is sent once, `seconds` after its client got its error, with the client's method, path, headers
and body, over a connection of the proxy's own (the upstream identity every forwarded request uses),
and journaled as `late-commit` with the apiserver's status: committed (2xx) or refused. Its answer
goes to `observed` as any answer the proxy sees (the revision log counts the write).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import Any

import httpx

from kube_fault_proxy.proxy.counters import Counters
from kube_fault_proxy.proxy.engine import Decision
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.revisions import first_revision
from kube_fault_proxy.proxy.upstream import Upstream
from kube_fault_proxy.proxy.written import written

# Hop-by-hop and framing headers are the new connection's own; an encoded answer could not be read.
DROPPED = frozenset({"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade",
                     "proxy-connection", "accept-encoding"})
TIMEOUT_SECONDS = 60.0
Observed = Callable[[RequestIdentity, int, str, bytes], None]  # ident, status, content type, body


def client_for(upstream: Upstream) -> httpx.AsyncClient:
    """An HTTP client to the apiserver with the proxy's upstream identity and trust."""
    if upstream.insecure:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    else:
        context = ssl.create_default_context(cafile=str(upstream.ca_file) if upstream.ca_file else None)
    if upstream.client_pem is not None:
        context.load_cert_chain(str(upstream.client_pem))
    return httpx.AsyncClient(base_url=upstream.url, verify=context, timeout=TIMEOUT_SECONDS)


class LateCommits:
    """The writes waiting to be sent; each one's task is kept until it ends."""

    def __init__(self, counters: Counters, client: Callable[[], httpx.AsyncClient], observed: Observed) -> None:
        self.counters = counters
        self._client_factory = client
        self._client: httpx.AsyncClient | None = None
        self.observed = observed
        self.tasks: set[asyncio.Task[None]] = set()

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

    async def close(self) -> None:
        """Cancel what has not been sent (the client is its owner's to close)."""
        for task in list(self.tasks):
            task.cancel()
