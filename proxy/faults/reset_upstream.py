"""resetUpstream: the client's apiserver connection drops; every stream on it fails at once."""

from __future__ import annotations

import random
from typing import ClassVar

from proxy.faults.base import FaultSpec
from proxy.faults.plan import CloseUpstream, Plan
from proxy.identity import RequestIdentity


class ResetUpstream(FaultSpec):
    """No settings: `resetUpstream: {}`. Like an apiserver restart, for one client."""

    kind: ClassVar[str] = "resetUpstream"

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        return Plan(before=(CloseUpstream(),))
