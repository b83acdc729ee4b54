"""outage: the apiserver vanishes for a while, without killing it."""

from __future__ import annotations

import random
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from kube_fault_proxy.proxy.faults.base import Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import Plan, StartOutage
from kube_fault_proxy.proxy.requests.identity import RequestIdentity


class Outage(FaultSpec):
    """Every client connection closes, new ones are refused and upstream connects fail, for
    `seconds`; then the proxy recovers by itself. The triggering request fails with the rest."""

    kind: ClassVar[str] = "outage"
    search_group: ClassVar[str] = "connection"
    weaker: ClassVar[str | None] = "reset"
    seconds: Annotated[float, Field(gt=0, le=3600, description="how long the apiserver stays unreachable")]
    refuse: Literal["close", "refuse", "blackhole"] = Field(
        "close", description="new connections: close = accept then close, refuse = connection refused, "
                             "blackhole = accept and never answer until the outage ends")

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        return {"seconds": float(rng.choice([1, 2, 3])), "refuse": rng.choice(["close", "refuse", "blackhole"])}

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        return Plan(before=(StartOutage(self.seconds, self.refuse),))
