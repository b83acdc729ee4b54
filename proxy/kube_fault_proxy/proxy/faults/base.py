"""The one interface every request fault kind implements."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kube_fault_proxy.proxy.faults.plan import Plan
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.schema.strict import StrictModel

INT64_MAX = 2**63 - 1  # the apiserver holds a CRD's integers as int64: a count beyond it is refused there too


@dataclass(frozen=True)
class Draw:
    """What a kind's search grammar may look at when it draws a rule's settings: the name of the rule's match
    in the target's narrow waist (rig/search/waist.py), and the events of other watches that may end a hold."""

    match_name: str = ""
    hold_until: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


# Where the fault search draws a kind's rules (rig/search/grammar.py): on requests it answers, on watches whose
# events it edits, on connections, or as a perturbed view (Sieve's stale and unobserved states, crashes at a point).
SEARCH_GROUPS = ("request", "watch", "connection", "view")


class FaultSpec(StrictModel):
    """A fault kind's settings; `plan` turns them into steps for one request. A kind also carries its part of
    the fault search's grammar: its group, whether a search draws it unless told (`--kinds`), the ranges its
    settings are drawn from (`draw`), the weaker kind a shrink tries in its place, and its traits (what the
    search reads instead of the kind's name)."""

    kind: ClassVar[str]
    traits: ClassVar[Traits]  # every kind declares its own (a test says so)
    # Injections a rule of this kind makes when its `when.maxInjections` is unset (None: unbounded).
    default_max_injections: ClassVar[int | None] = None
    search_group: ClassVar[str]  # one of SEARCH_GROUPS
    # The view kinds are searched only when named, so a seeded search draws the very trials it drew before them.
    searched_by_default: ClassVar[bool] = True
    # Shrinking: the kind tried in this one's place (strong to weak, ending in abort 500), with its weakest settings.
    weaker: ClassVar[str | None] = None

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        """Settings for a searched rule of this kind, every choice from `rng` (ranges: docs/guides/search.md)."""
        raise NotImplementedError

    @classmethod
    def companion(cls, rng: random.Random) -> dict[str, Any]:
        """Settings for a rule the search adds for another rule's sake (to reopen the target's watches, or to make
        a resumed watch relist): asked only of a kind whose traits say it reopens or takes resumed watches."""
        raise NotImplementedError

    @classmethod
    def relists(cls, settings: Mapping[str, Any]) -> bool:
        """Whether a rule of this kind with these settings makes a client's resumed watch relist."""
        return False

    @classmethod
    def weakest(cls) -> dict[str, Any]:
        """The settings a shrink puts in place of a stronger kind's (and tries instead of this kind's own)."""
        return {}

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
