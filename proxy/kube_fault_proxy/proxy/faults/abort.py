"""abort: answer with an error Status (upstream never sees the request)."""

from __future__ import annotations

import random
from typing import Annotated, Any, ClassVar

from pydantic import Field

from kube_fault_proxy.proxy.faults.base import Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import Plan, Respond
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.requests.status import status_reply


class Abort(FaultSpec):
    """An error status with a real metav1.Status body; Retry-After only when asked for."""

    kind: ClassVar[str] = "abort"
    traits: ClassVar[Traits] = Traits(acts_on="request")
    search_group: ClassVar[str] = "request"
    status: Annotated[int, Field(ge=400, le=599, description="the HTTP status answered (400-599)")]
    reason: Annotated[str, Field(min_length=1, max_length=64)] | None = Field(
        None, description="the Status reason (default: the apiserver's own for this status, e.g. InternalError)")
    message: Annotated[str, Field(max_length=4096)] | None = Field(
        None, description="the Status message (default: worded like the apiserver's, naming the object)")
    retryAfterSeconds: Annotated[int, Field(ge=0, le=3600)] | None = Field(
        None, description="send Retry-After (client-go then retries a 429 or 5xx silently); unset: no header")

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        spec: dict[str, Any] = {"status": rng.choice([500, 503, 504, 409, 404, 403])}
        if rng.random() < 0.3:
            spec["retryAfterSeconds"] = rng.choice([1, 5])
        return spec

    @classmethod
    def weakest(cls) -> dict[str, Any]:
        return {"status": 500}

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        reply = status_reply(self.status, ident, self.reason, self.message, self.retryAfterSeconds)
        return Plan(before=(Respond(reply),))
