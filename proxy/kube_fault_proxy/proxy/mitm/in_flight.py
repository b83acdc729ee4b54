"""The writes the proxy forwarded to the apiserver and whose answer their client has not yet had: what a cut (a
reset of a client's upstream connections, an outage) fails in flight, though each may already have committed.
Journaled as `inFlight` on the cut's record, so the ledger can count a pod create cut in flight like one that
committed unanswered.

Per request, only a write pays: one dict insert when the last `request` hook lets it go upstream, one removal at its
answer or its error. Bodies are read only at a cut, from the flows still held here. `WritesInFlight` is the state
(shared with the fault addon and the outage, which read it as they cut); `InFlightTracking` the addon that feeds it."""

from __future__ import annotations

import weakref
from typing import Any

from mitmproxy import http

from kube_fault_proxy.proxy.engine import Decision
from kube_fault_proxy.proxy.mitm.flow_keys import AFTER, DECISION, IDENT
from kube_fault_proxy.proxy.mitm.http_parts import header_values
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.written import requested

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _body(request: http.Request) -> tuple[str, bytes | None]:
    """A request's content type and its body, decoded if it has a content encoding."""
    values = header_values(request.headers, b"content-type", b"content-encoding")
    body = request.get_content(strict=False) if values.get(b"content-encoding") else request.raw_content
    return values.get(b"content-type", ""), body


def describe(flow: http.HTTPFlow) -> dict[str, Any] | None:
    """One write in flight as the journal names it: verb, resource (and subresource), namespace, name; a create's
    name or generateName and controller (`owner`: kind, name, uid) from its body, JSON or protobuf; the rule and
    fault that decided it, if one did; the apiserver's status if its answer had arrived. None for a request that is
    no write of a resource."""
    ident: RequestIdentity | None = flow.metadata.get(IDENT)
    if ident is None or not ident.is_resource or ident.verb not in ("create", "update", "patch", "delete",
                                                                      "deletecollection"):
        return None
    out: dict[str, Any] = {"verb": ident.verb, "resource": ident.resource}
    if ident.subresource:
        out["subresource"] = ident.subresource
    if ident.namespace:
        out["namespace"] = ident.namespace
    if ident.name:
        out["name"] = ident.name
    if ident.verb == "create" and not ident.subresource:
        asked = requested(*_body(flow.request)) or {}
        for key in ("name", "generateName", "namespace", "owner"):
            if asked.get(key) and key not in out:
                out[key] = asked[key]
    decision: Decision | None = flow.metadata.get(DECISION)
    if decision is not None:
        out.update(rule=decision.rule, fault=decision.fault)
    if flow.response is not None:
        out["upstreamStatus"] = flow.response.status_code
    return out


class WritesInFlight:
    """The writes forwarded upstream and not yet answered to their client. A write whose committed answer a fault
    holds (its after-steps journaled, `AFTER`) is left out of a cut's list: its own `inject` record counts it."""

    def __init__(self) -> None:
        # flow id -> flow (weak: a flow mitmproxy drops without a last hook leaves nothing behind)
        self._flows: weakref.WeakValueDictionary[str, http.HTTPFlow] = weakref.WeakValueDictionary()

    def sent(self, flow: http.HTTPFlow) -> None:
        """The proxy let this write go upstream."""
        self._flows[flow.id] = flow

    def ended(self, flow: http.HTTPFlow) -> None:
        """Its client had its answer, or its error."""
        self._flows.pop(flow.id, None)

    def cut(self, client_ids: set[str] | None = None) -> list[dict[str, Any]]:
        """The writes in flight on these client connections (every one if None), oldest first, as `describe`
        names them: call it just before cutting them."""
        out = []
        for flow in sorted(list(self._flows.values()), key=lambda f: f.request.timestamp_start):
            if (client_ids is not None and flow.client_conn.id not in client_ids) or AFTER in flow.metadata:
                continue
            if (described := describe(flow)) is not None:
                out.append(described)
        return out

    def __len__(self) -> int:
        """How many writes are in flight."""
        return len(self._flows)


class InFlightTracking:
    """Last in serve's chain: a write whose `request` hook ends with it still live is forwarded upstream, and in
    flight until its `response` hook (its client's answer, after every fault step) or its `error`."""

    def __init__(self, writes: WritesInFlight) -> None:
        self.writes = writes

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.request.method in WRITE_METHODS and flow.live and flow.response is None and flow.error is None:
            self.writes.sent(flow)

    def response(self, flow: http.HTTPFlow) -> None:
        self.writes.ended(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self.writes.ended(flow)
