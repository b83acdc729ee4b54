"""The live state of a proxy: the library, which profile is active, what was counted, the journal."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from kube_fault_proxy.proxy.activations import (
    Activation,
    Activations,
    ProfileInUse,
    Schedule,
    UnknownProfile,
)
from kube_fault_proxy.proxy.counters import Counters
from kube_fault_proxy.proxy.engine import Decision
from kube_fault_proxy.proxy.journal import Journal
from kube_fault_proxy.proxy.profiles.library import Library
from kube_fault_proxy.proxy.requests.identity import RequestIdentity

__all__ = ["Activation", "ProfileInUse", "Runtime", "Schedule", "UnknownProfile"]


class Runtime:
    """The activations and the counters the addons and the control plane share; one event loop, so no locks."""

    def __init__(
        self,
        library: Library,
        journal: Journal,
        clock: Callable[[], float],
        wall: Callable[[], float],
        schedule: Schedule | None = None,
        new_seed: Callable[[], int] = lambda: secrets.randbits(31),
        scheduler_build: str | None = None,
    ) -> None:
        self.library = library
        self.journal = journal
        self.clock = clock
        self.scheduler_build = scheduler_build
        self.activations = Activations(library, journal, clock, wall, schedule, new_seed, scheduler_build)
        self.counters = Counters(journal, clock)

    def decide(self, ident: RequestIdentity) -> Decision | None:
        """Count one request, then the active profile's decision for it (None: pass through): the fault addon's
        one question per request."""
        self.counters.request(ident)
        return self.activations.decide(ident)

    def stats(self) -> dict[str, Any]:
        """Requests, per-rule counters of the active activation, injections per rule and kind."""
        active = self.activations.active
        return self.counters.stats(active.engine if active is not None else None)

    def reset_stats(self) -> None:
        """Zero the counters shown by stats; the engine's own state (maxInjections…) is kept."""
        active = self.activations.active
        self.counters.reset(active.engine if active is not None else None)
