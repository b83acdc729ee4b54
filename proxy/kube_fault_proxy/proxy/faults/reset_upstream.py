"""resetUpstream: the client's apiserver connection drops; every stream on it fails at once."""

from __future__ import annotations

import random
from typing import Any, ClassVar

from kube_fault_proxy.proxy.faults.base import Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import CloseUpstream, Plan
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity


class ResetUpstream(FaultSpec):
    """No settings: `resetUpstream: {}`. Like an apiserver restart, for one client."""

    kind: ClassVar[str] = "resetUpstream"
    # Seen on the rig (docs/records/view-kinds-short-searches-2026-12-03.md): both schedulers relist through a
    # WatchList after it, as after a restart.
    traits: ClassVar[Traits] = Traits(acts_on="any", reopens="relist")
    search_group: ClassVar[str] = "connection"
    weaker: ClassVar[str | None] = "reset"

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        return {}

    @classmethod
    def companion(cls, rng: random.Random) -> dict[str, Any]:
        return {}

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        return Plan(before=(CloseUpstream(),))
