"""Bind commits: the moment the proxy learns a Binding committed, which ends its pod's bind latency.

The apiserver's 2xx answer to a Binding POST, read in `response` before the fault addon (so before a fault
replaces it with an error, holds it at a crash point or keeps it back: the bind committed when the apiserver
answered). A fault's own answer is never a 2xx (an error's status is 400-599, a throttle's 429), so a 2xx here is
the apiserver's. A write the proxy sends later itself ends it too: `LateCommits` calls `committed` with the
write's path once the apiserver answers 2xx. A commit whose answer never reached the proxy (the apiserver died
after writing) is not learned: its pod waits in the table until it is evicted.
"""

from __future__ import annotations

from collections.abc import Callable

from mitmproxy import http


class BindCommits:
    """Calls `committed(path)` (the Binding's path without its query) for each Binding the apiserver answered 2xx."""

    def __init__(self, committed: Callable[[str], object]) -> None:
        self.committed = committed

    def response(self, flow: http.HTTPFlow) -> None:
        req, response = flow.request, flow.response
        if req.method != "POST" or response is None or not 200 <= response.status_code < 300:
            return
        path = req.path.partition("?")[0]
        if path.endswith("/binding"):
            self.committed(path)  # one dict operation: the pod's entry goes
