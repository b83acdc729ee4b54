"""What the fault search needs to know of a kind, declared by the kind: the requests it acts on, what it does to a
client's watches, how its rules are timed, and what a trial must do for it. The search (rig/search/) reads these
and never a kind's name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

# The requests a kind's rules are drawn on, named by what a target's waist (rig/search/waist.py) groups:
# request: any request but a watch; write: the target's writes; resent-write: the writes the proxy may send again
# later, as the client's own; watch: watches; any: every request, watches too (a connection fault).
ActsOn = Literal["request", "write", "resent-write", "watch", "any"]
# Which of a resource's watch requests a rule on watches decides: a relist (a LIST, or a watch with
# sendInitialEvents), a watch resumed from a revision, or whichever comes.
WatchRequests = Literal["relist", "resumed", "any"]
# How a target opens its watches again after the kind acted: it relists them (a WatchList, as after a restart), or
# resumes them from their revision.
Reopen = Literal["relist", "resume"]
# What a trial does for the kind: `kill` the target (kill -9) on the kind's journal record and start it again.
TrialNeed = Literal["kill"]

ACTS_ON: tuple[str, ...] = get_args(ActsOn)
WATCH_REQUESTS: tuple[str, ...] = get_args(WatchRequests)
REOPENS: tuple[str, ...] = get_args(Reopen)
TRIAL_NEEDS: tuple[str, ...] = get_args(TrialNeed)


@dataclass(frozen=True)
class Traits:
    """A kind's traits, as the search reads them."""

    acts_on: ActsOn
    # On watches: which watch request of a resource a rule decides (and so which reopen lets it act).
    watch_requests: WatchRequests = "any"
    # After it acts the target opens its watches again (None: it leaves them open).
    reopens: Reopen | None = None
    # It serves a relist from an earlier revision (a stale view): the plan places it at a write, as a view from
    # before that write.
    stale_view: bool = False
    # It acts through a watch's events: its rule has acted once it edited one (a `watch-event` record), not when it
    # decided the watch.
    edits_events: bool = False
    # A rule of it acts once, at a count of the target's anchor (a crash point); the shrink tries it later.
    at_a_count: bool = False
    # The search may give its rule a probability (False: the kind draws its own, or acts once).
    rule_probability: bool = True
    # The setting that says how long one injection lasts, in seconds (None: the shrink counts one second).
    duration: str | None = None
    # It changes the order a client sees events in across its watches (one watch's events later than another's):
    # `search orders` gives its rules new draws for each order.
    orders_events: bool = False
    # The setting it draws per event (an order differs by it even when the rule applies to every watch).
    order_draw: str | None = None
    # What the trial must do for it; a target whose trial cannot refuses the kind.
    trial_needs: frozenset[TrialNeed] = frozenset()

    def __post_init__(self) -> None:
        for name, value, allowed in (("acts_on", self.acts_on, ACTS_ON),
                                     ("watch_requests", self.watch_requests, WATCH_REQUESTS),
                                     ("reopens", self.reopens, (*REOPENS, None)),
                                     *(("trial_needs", need, TRIAL_NEEDS) for need in self.trial_needs)):
            if value not in allowed:
                raise ValueError(f"traits: {name} {value!r} is not one of {', '.join(map(str, allowed))}")
