"""reset: reset the request's HTTP/2 stream (HTTP/1: close the connection) before upstream sees it."""

from __future__ import annotations

import random
from typing import Any, ClassVar

from kube_fault_proxy.proxy.faults.base import Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import Plan, ResetStream
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity


class Reset(FaultSpec):
    """No settings: `reset: {}`."""

    kind: ClassVar[str] = "reset"
    traits: ClassVar[Traits] = Traits(acts_on="request")
    search_group: ClassVar[str] = "request"
    weaker: ClassVar[str | None] = "abort"

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        return {}

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        return Plan(before=(ResetStream(),))
