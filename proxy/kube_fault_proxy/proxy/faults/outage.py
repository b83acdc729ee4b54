"""outage: the apiserver vanishes for a while, without killing it."""

from __future__ import annotations

import random
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from kube_fault_proxy.proxy.faults.base import Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import Plan, StartOutage
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity


class Outage(FaultSpec):
    """Every client connection closes, new ones are refused and upstream connects fail, for
    `seconds`; then the proxy recovers by itself. The triggering request fails with the rest."""

    kind: ClassVar[str] = "outage"
    # Seen on the rig (docs/records/view-kinds-short-searches-2026-12-03.md): after an outage YuniKorn and
    # kube-controller-manager resumed their watches from their revision.
    traits: ClassVar[Traits] = Traits(acts_on="any", reopens="resume", duration="seconds")
    search_group: ClassVar[str] = "connection"
    weaker: ClassVar[str | None] = "reset"
    seconds: Annotated[float, Field(gt=0, le=3600, description="how long the apiserver stays unreachable")]
    refuse: Literal["close", "refuse", "blackhole"] = Field(
        "close", description="new connections: close = accept then close, refuse = connection refused, "
                             "blackhole = accept and never answer until the outage ends")

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        return {"seconds": float(rng.choice([1, 2, 3])), "refuse": rng.choice(["close", "refuse", "blackhole"])}

    @classmethod
    def companion(cls, rng: random.Random) -> dict[str, Any]:
        """A one-second outage: connections closed or refused (a blackhole would hold the reopen back)."""
        return {"seconds": 1.0, "refuse": rng.choice(["close", "refuse"])}

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        return Plan(before=(StartOutage(self.seconds, self.refuse),))
