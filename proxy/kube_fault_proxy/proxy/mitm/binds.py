"""Binding POST outcomes as their clients saw them: each counted once, the ones in flight kept for an outage."""

from __future__ import annotations

import weakref
from collections.abc import Callable

from mitmproxy import http

from kube_fault_proxy.proxy.requests.binding import is_binding_post


class BindOutcomes:
    """Counts every Binding POST once, by the answer its client finally got (a 2xx, a 429 with
    Retry-After, another status, none).

    Its addon (`BindAccounting`) reports each Binding when it is read and whenever it may have ended (a
    response, an error, a kill); only the first end counts. One read but not yet ended is in flight while its
    flow lives (held weakly, never touched): an outage fails them all at once, as their clients see
    it, since mitmproxy runs no hook for a flow whose connection it has already dropped.
    """

    def __init__(self, outcome: Callable[[int | None, str | None], None]) -> None:
        self._outcome = outcome
        self._in_flight: weakref.WeakValueDictionary[str, object] = weakref.WeakValueDictionary()
        # read(request_id, owner): a Binding POST was read, in flight until it ends (or `owner`, its
        # flow, is gone). The registry's own setter: reading a Binding costs no call of ours.
        self.read: Callable[[str, object], None] = self._in_flight.__setitem__

    def ended(self, request_id: str, status: int | None, retry_after: str | None = None) -> None:
        """The answer its client got (None: none) and a 429's Retry-After; counted if it is the first
        end of one in flight."""
        if self._in_flight.pop(request_id, None) is not None:
            self._outcome(status, retry_after)

    def fail_in_flight(self) -> int:
        """An outage began: every Binding in flight dies with it, counted as failed. Returns how many."""
        failed = list(self._in_flight.items())  # held until all are counted
        for request_id, _ in failed:
            self.ended(request_id, None)
        return len(failed)

    def __len__(self) -> int:
        """How many are in flight."""
        return len(self._in_flight)


class BindReads:
    """The bind accounting's first half, early in the chain (before an outage drops requests and before any fault
    holds one): a Binding POST is in flight once the proxy has read it whole, so an outage meanwhile fails it. Its
    pod's first Binding POST starts that pod's bind latency (`attempt`, keyed by the path without its query; its
    commit is `BindCommits`')."""

    def __init__(self, outcomes: BindOutcomes, attempt: Callable[[str], None] = lambda pod: None) -> None:
        self.outcomes = outcomes
        self.attempt = attempt

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.response or flow.error or not flow.live:
            return  # answered or killed before it was read: never forwarded
        req = flow.request
        if is_binding_post(req.method, req.path):
            self.outcomes.read(flow.id, flow)
            self.attempt(req.path.partition("?")[0])


class BindAccounting:
    """The addon that counts Binding POSTs (`BindOutcomes`) by the answer their client finally got; its first half,
    a `BindReads` over the same outcomes, goes early in the chain and marks them in flight.

    It comes after the fault addon in the chain: mitmproxy runs a hook's addons in order and awaits each, so its
    `response` sees the answer after every fault step (a substituted error, a crash point's hold, a delay), and its
    `error` the end of a request killed in its `request` hook (an outage's drop, a reset)."""

    def __init__(self, outcomes: BindOutcomes) -> None:
        self.outcomes = outcomes

    def response(self, flow: http.HTTPFlow) -> None:
        self.ended(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self.ended(flow)

    def ended(self, flow: http.HTTPFlow) -> None:
        """What a Binding's client got: the answer (a 429 with its Retry-After), or none after an error or a kill
        (nothing for a request that is no Binding: it was never in flight)."""
        response = flow.response
        if flow.error is None and response is not None:
            status = response.status_code
            self.outcomes.ended(flow.id, status, response.headers.get("retry-after") if status == 429 else None)
        else:
            self.outcomes.ended(flow.id, None)
