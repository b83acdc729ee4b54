"""throttle: a 429 as API Priority and Fairness sends it, or as a Status with retryAfterSeconds."""

from __future__ import annotations

import random
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from kube_fault_proxy.proxy.faults.base import Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import Plan, Respond
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.requests.status import apf_throttle_reply, status_reply


class Throttle(FaultSpec):
    """429 TooManyRequests; client-go retries it silently (up to 10 times) because of Retry-After."""

    kind: ClassVar[str] = "throttle"
    traits: ClassVar[Traits] = Traits(acts_on="request")
    search_group: ClassVar[str] = "request"
    weaker: ClassVar[str | None] = "abort"
    retryAfterSeconds: Annotated[int, Field(ge=1, le=32)] = Field(
        1, description="the Retry-After seconds, as API Priority and Fairness sends them (1-32)")
    form: Literal["apf", "status"] = Field(
        "apf", description="apf: plain-text body as APF sends it; status: a Status with details.retryAfterSeconds")

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        return {"retryAfterSeconds": rng.choice([1, 2, 5]), "form": rng.choice(["apf", "status"])}

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        if self.form == "apf":
            return Plan(before=(Respond(apf_throttle_reply(self.retryAfterSeconds)),))
        reply = status_reply(429, ident, retry_after_seconds=self.retryAfterSeconds)
        return Plan(before=(Respond(reply),))
