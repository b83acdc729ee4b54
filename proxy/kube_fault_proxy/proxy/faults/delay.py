"""delay: hold the request before forwarding it, or hold the response before returning it."""

from __future__ import annotations

import random
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from kube_fault_proxy.proxy.faults.base import Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import Plan, Wait
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity


class Delay(FaultSpec):
    """seconds ± jitterSeconds (uniform, never below zero); other requests are not held up."""

    kind: ClassVar[str] = "delay"
    traits: ClassVar[Traits] = Traits(acts_on="request", duration="seconds")
    search_group: ClassVar[str] = "request"
    seconds: Annotated[float, Field(gt=0, le=3600, description="how long the request or its answer waits")]
    jitterSeconds: Annotated[float, Field(ge=0, le=3600)] = Field(
        0.0, description="plus or minus this much, drawn uniformly from the rule's seeded stream")
    phase: Literal["request", "response"] = Field(
        "request", description="request: wait before forwarding; response: wait before returning the answer")

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        seconds = round(0.05 * (60 ** rng.random()), 3)  # log-uniform over 0.05-3 s
        return {"seconds": seconds, "phase": rng.choice(["request", "response"])}

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        seconds = self.seconds
        if self.jitterSeconds:
            seconds = max(0.0, seconds + rng.uniform(-self.jitterSeconds, self.jitterSeconds))
        wait = (Wait(seconds),)
        return Plan(before=wait) if self.phase == "request" else Plan(after=wait)
