"""throttle: a 429 as API Priority and Fairness sends it, or as a Status with retryAfterSeconds."""

from __future__ import annotations

import random
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from kube_fault_proxy.proxy.faults.base import FaultSpec
from kube_fault_proxy.proxy.faults.plan import Plan, Respond
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.requests.status import apf_throttle_reply, status_reply


class Throttle(FaultSpec):
    """429 TooManyRequests; client-go retries it silently (up to 10 times) because of Retry-After."""

    kind: ClassVar[str] = "throttle"
    retryAfterSeconds: Annotated[int, Field(ge=1, le=32)] = 1
    form: Literal["apf", "status"] = "apf"

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        if self.form == "apf":
            return Plan(before=(Respond(apf_throttle_reply(self.retryAfterSeconds)),))
        reply = status_reply(429, ident, retry_after_seconds=self.retryAfterSeconds)
        return Plan(before=(Respond(reply),))
