"""The fault kinds as the search sees them: read from the registry (proxy/faults/) and the kinds' traits
(proxy/faults/traits.py). The search names no kind; what it asks of one is here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kube_fault_proxy.proxy.faults import KINDS, FaultSpec
from kube_fault_proxy.proxy.faults.traits import Traits

SPECS: dict[str, type[FaultSpec]] = {k.kind: k for k in KINDS}


def _group(group: str, default: bool) -> tuple[str, ...]:
    return tuple(k.kind for k in KINDS if k.search_group == group and k.searched_by_default == default)


# The groups follow the registry's order, so a seeded search draws kinds in the order it always did.
REQUEST_KINDS = _group("request", True)
WATCH_KINDS = _group("watch", True)
CONNECTION_KINDS = _group("connection", True)
ALL_KINDS = REQUEST_KINDS + WATCH_KINDS + CONNECTION_KINDS  # a search's kinds unless told (--kinds)
# Perturbed views (Sieve's stale and unobserved states, and crashes at a point): known to the grammar,
# searched when named with --kinds. Not in the default set, so a seeded search draws the very trials it drew
# before they came.
VIEW_KINDS = tuple(k.kind for k in KINDS if not k.searched_by_default)
KNOWN_KINDS = ALL_KINDS + VIEW_KINDS


def traits(kind: str) -> Traits:
    """A kind's traits (ValueError for a name the registry does not know)."""
    spec = SPECS.get(kind)
    if spec is None:
        raise ValueError(f"unknown fault kind {kind!r}")
    return spec.traits


def _restarts(k: type[FaultSpec]) -> bool:
    """Its reopen is a restart (the trial kills the target): the slow one."""
    return "kill" in k.traits.trial_needs


# A trial switches its profile on after the target has started and opened its watches, and a watch rule acts on a
# watch opened after that (its request decides it): these kinds make the target open its watches again. Cheapest
# first (a dropped connection the target relists after, one it resumes after, a restart), the order a seeded
# search has always drawn them in.
REOPEN_KINDS = tuple(k.kind for k in sorted((k for k in KINDS if k.traits.reopens is not None),
                                            key=lambda k: (_restarts(k), k.traits.reopens == "resume")))
RELIST_KINDS = tuple(k for k in REOPEN_KINDS if SPECS[k].traits.reopens == "relist")  # the target relists after
RESUME_KINDS = tuple(k for k in REOPEN_KINDS if SPECS[k].traits.reopens == "resume")  # it resumes from its revision
RESTART_KINDS = frozenset(k for k in REOPEN_KINDS if _restarts(SPECS[k]))
# Kinds whose rule on watches takes a resumed watch and makes its client relist (a companion to a resuming reopen).
RESUMED_TAKERS = tuple(k.kind for k in KINDS if k.traits.watch_requests == "resumed")
# Kinds that edit a watch's events: fired when an event was edited (a `watch-event`), not when the watch was opened.
EVENT_EDITORS = frozenset(k.kind for k in KINDS if k.traits.edits_events)
# Kinds that change the order a client sees events in across its watches (`search orders` draws them anew).
ORDER_KINDS = frozenset(k.kind for k in KINDS if k.traits.orders_events)


def reopen_weight(kind: str) -> int:
    """How often a reopen of this kind is drawn as a companion: a restart (kill -9 and start) is the slow reopen,
    drawn half as often as a dropped connection."""
    return 1 if kind in RESTART_KINDS else 2


def event_lag(rules: Iterable[Mapping[str, Any]]) -> float:
    """The longest the rules' edited watches may keep an event back, in seconds: a rule whose kind edits events
    holds them at most its settings' seconds (delay plus jitter, a hold's cap, a coalescing window; defaults
    included); 0 with no such rule. While the profile is on (the faulted load's settle) an edited watch may keep
    an event back that long, so a trial's settle waits past it; once the profile is off, it releases what it keeps."""
    lag = 0.0
    for rule in rules:
        kind = str(next(iter(rule["fault"])))
        if traits(kind).edits_events:
            settings = SPECS[kind].model_validate(rule["fault"][kind] or {}).model_dump()
            lag = max(lag, sum(float(v) for k, v in settings.items()
                               if k.lower().endswith("seconds") and isinstance(v, (int, float))))
    return lag
