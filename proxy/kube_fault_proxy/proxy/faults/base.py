"""The one interface every request fault kind implements."""

from __future__ import annotations

import random
from typing import ClassVar

from kube_fault_proxy.proxy.faults.plan import Plan
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.schema.strict import StrictModel


class FaultSpec(StrictModel):
    """A fault kind's settings; `plan` turns them into steps for one request."""

    kind: ClassVar[str]
    # Injections a rule of this kind makes when its `when.maxInjections` is unset (None: unbounded).
    default_max_injections: ClassVar[int | None] = None

    def applies_to(self, ident: RequestIdentity) -> bool:
        """Whether this fault can act on the request at all (e.g. not on a watch)."""
        return True

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        """The steps to perform on this request; rng is the rule's own seeded source."""
        raise NotImplementedError

    @property
    def follows_up_relist(self) -> bool:
        """Whether, once injected, it also acts on the client's next relist of the same resource."""
        return False

    def relist_plan(self, relist: RequestIdentity) -> Plan:
        """The steps for that next relist (only asked when `follows_up_relist`)."""
        raise NotImplementedError
