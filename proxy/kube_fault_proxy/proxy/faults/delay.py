"""delay: hold the request before forwarding it, or hold the response before returning it."""

from __future__ import annotations

import random
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from kube_fault_proxy.proxy.faults.base import FaultSpec
from kube_fault_proxy.proxy.faults.plan import Plan, Wait
from kube_fault_proxy.proxy.requests.identity import RequestIdentity


class Delay(FaultSpec):
    """seconds ± jitterSeconds (uniform, never below zero); other requests are not held up."""

    kind: ClassVar[str] = "delay"
    seconds: Annotated[float, Field(gt=0, le=3600)]
    jitterSeconds: Annotated[float, Field(ge=0, le=3600)] = 0.0
    phase: Literal["request", "response"] = "request"

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        seconds = self.seconds
        if self.jitterSeconds:
            seconds = max(0.0, seconds + rng.uniform(-self.jitterSeconds, self.jitterSeconds))
        wait = (Wait(seconds),)
        return Plan(before=wait) if self.phase == "request" else Plan(after=wait)
