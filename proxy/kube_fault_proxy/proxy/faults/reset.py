"""reset: reset the request's HTTP/2 stream (HTTP/1: close the connection) before upstream sees it."""

from __future__ import annotations

import random
from typing import ClassVar

from kube_fault_proxy.proxy.faults.base import FaultSpec
from kube_fault_proxy.proxy.faults.plan import Plan, ResetStream
from kube_fault_proxy.proxy.requests.identity import RequestIdentity


class Reset(FaultSpec):
    """No settings: `reset: {}`."""

    kind: ClassVar[str] = "reset"

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        return Plan(before=(ResetStream(),))
