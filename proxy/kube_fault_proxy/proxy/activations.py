"""Which profile is active: activation, epoch and TTL, and the journal record of every switch."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kube_fault_proxy.proxy.engine import Decision, Engine
from kube_fault_proxy.proxy.journal import Journal
from kube_fault_proxy.proxy.profiles.library import Library
from kube_fault_proxy.proxy.requests.identity import RequestIdentity

Schedule = Callable[[float, Callable[[], None]], object]


class UnknownProfile(LookupError):
    """No profile by that name."""


class ProfileInUse(RuntimeError):
    """The profile is active and cannot be removed."""


@dataclass(frozen=True, slots=True)
class Activation:
    """One activation: a profile, its epoch and seed, when it started and when it reverts."""

    engine: Engine
    activated_at: float
    activated_wall: float
    ttl_seconds: float | None

    @property
    def expires_at(self) -> float | None:
        """Monotonic time at which the proxy reverts to pass-through, if it has a TTL."""
        return None if self.ttl_seconds is None else self.activated_at + self.ttl_seconds

    def describe(self, now: float) -> dict[str, Any]:
        """JSON view for the control plane."""
        remaining = None if self.expires_at is None else max(0.0, self.expires_at - now)
        return {
            "profile": self.engine.profile.name,
            "epoch": self.engine.epoch,
            "seed": self.engine.seed,
            "activatedAt": self.activated_wall,
            "ttlSeconds": self.ttl_seconds,
            "remainingSeconds": remaining,
        }


class Activations:
    """The active profile, if any: switched by activate/deactivate, reverted once its TTL is up."""

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
        # The scheduler under test's exact build (serve --scheduler-build), named in every activation record.
        self.scheduler_build = scheduler_build
        self._wall = wall
        self._schedule = schedule
        self._new_seed = new_seed
        self.active: Activation | None = None
        self.epoch = 0
        # Called with an activation's epoch once it is over (switched off, replaced, its TTL up): the watch edits
        # it opened end then.
        self.on_end: list[Callable[[int], None]] = []

    def activate(
        self, name: str, seed: int | None = None, ttl_seconds: float | None = None,
        source: str = "api", **details: Any,
    ) -> Activation:
        """Make a profile active from the very next request; replaces any active one. `source` and
        `details` (e.g. the FaultActivation it came from) go into the journal record."""
        entry = self.library.get(name)
        if entry is None:
            raise UnknownProfile(name)
        if self.active is not None:
            self._end("replaced")
        seed = seed if seed is not None else entry.profile.spec.seed
        seed = seed if seed is not None else self._new_seed()
        self.epoch += 1
        now = self.clock()
        engine = Engine(entry.profile, self.epoch, seed, now)
        self.active = Activation(engine, now, self._wall(), ttl_seconds)
        self.journal.append(
            "activate", profile=name, epoch=self.epoch, seed=seed, ttlSeconds=ttl_seconds,
            source=source, **({"build": self.scheduler_build} if self.scheduler_build else {}), **details,
        )
        if ttl_seconds is not None and self._schedule is not None:
            epoch = self.epoch
            self._schedule(ttl_seconds, lambda: self._expire(epoch))
        return self.active

    def deactivate(self, reason: str = "api", **details: Any) -> Activation | None:
        """Back to pass-through; returns what was active."""
        return self._end(reason, **details) if self.active is not None else None

    def _end(self, reason: str, **details: Any) -> Activation | None:
        ended, self.active = self.active, None
        if ended is not None:
            self.journal.append(
                "deactivate", profile=ended.engine.profile.name, epoch=ended.engine.epoch,
                reason=reason, **details,
            )
            for listener in self.on_end:
                listener(ended.engine.epoch)
        return ended

    def _expire(self, epoch: int) -> None:
        if self.active is not None and self.active.engine.epoch == epoch:
            self._end("ttl")

    def delete_profile(self, name: str) -> bool:
        """Remove a profile from the library; the active one cannot be removed."""
        if self.active is not None and self.active.engine.profile.name == name:
            raise ProfileInUse(name)
        return self.library.delete(name)

    def decide(self, ident: RequestIdentity) -> Decision | None:
        """The active profile's decision for one request (None: pass through); a TTL that is up ends it."""
        active = self.active
        if active is None:
            return None
        now = self.clock()
        expires = active.expires_at
        if expires is not None and now >= expires:
            self._end("ttl")
            return None
        return active.engine.decide(ident, now)

    def answered(self, ident: RequestIdentity, status: int) -> None:
        """The apiserver's answer to a request that passed through (triggers counting answers)."""
        active = self.active
        if active is not None and active.engine.counts_answers:
            active.engine.answered(ident, status)

    def refund(self, decision: Decision, ident: RequestIdentity) -> None:
        """Give a decision's turn back to its rule, if its activation is still the active one."""
        active = self.active
        if active is not None:
            active.engine.refund(decision, ident)
