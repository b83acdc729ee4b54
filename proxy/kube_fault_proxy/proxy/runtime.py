"""The live state of a proxy: the library, the active profile, its TTL, stats and journal."""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kube_fault_proxy.proxy.connections import ConnectionCounts
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


class Runtime:
    """Everything the addon and the control plane share; runs on one event loop, so no locks."""

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
        # The scheduler under test's exact build (serve --scheduler-build), named in every activation record.
        self.scheduler_build = scheduler_build
        self.journal = journal
        self.clock = clock
        self._wall = wall
        self._schedule = schedule
        self._new_seed = new_seed
        self.active: Activation | None = None
        self.epoch = 0
        self.requests = 0
        self.injections: Counter[tuple[str, str, str]] = Counter()
        self.by_fault: Counter[str] = Counter()
        self.events: Counter[str] = Counter()
        self.requests_by: Counter[tuple[str, str, bool]] = Counter()
        # Binding POST outcomes as the client saw them (never reset: samplers diff them)
        self.binds: Counter[str] = Counter()
        # Never reset: what /metrics exports as Prometheus counters.
        self.injections_total: Counter[tuple[str, str, str]] = Counter()
        self.events_total: Counter[str] = Counter()
        self._baseline: dict[tuple[int, str], dict[str, int]] = {}
        # Fed by the proxy's connection hooks; never reset (samplers diff them).
        self.connections = ConnectionCounts()
        self._requests_baseline = 0
        self._unparsable_seen: set[str] = set()  # kinds already journaled (a bounded set of reasons)

    # --- activation -------------------------------------------------------------------

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
        return ended

    def _expire(self, epoch: int) -> None:
        if self.active is not None and self.active.engine.epoch == epoch:
            self._end("ttl")

    def delete_profile(self, name: str) -> bool:
        """Remove a profile from the library; the active one cannot be removed."""
        if self.active is not None and self.active.engine.profile.name == name:
            raise ProfileInUse(name)
        return self.library.delete(name)

    # --- per request ------------------------------------------------------------------

    def decide(self, ident: RequestIdentity) -> Decision | None:
        """The active profile's decision for one request (None: pass through)."""
        self.requests += 1
        if ident.unparsable is not None:
            self._unparsable(ident, ident.unparsable)
        if ident.is_resource:
            self.requests_by[(ident.verb, ident.resource, ident.initial_events)] += 1  # formatted in stats()
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

    def performed(self, decision: Decision, ident: RequestIdentity, **outcome: Any) -> None:
        """Count and journal an injection once it has been carried out."""
        key = (decision.profile, decision.rule, decision.fault)
        self.injections[key] += 1
        self.injections_total[key] += 1
        self.by_fault[decision.fault] += 1
        self.journal.append("inject", **decision.stamp(), request=ident.as_dict(), **outcome)

    def bind_outcome(self, status: int | None) -> None:
        """Count one Binding POST by what its client got: 2xx, another status, or no answer."""
        self.binds["succeeded" if status is not None and 200 <= status < 300 else "failed"] += 1

    def _unparsable(self, ident: RequestIdentity, kind: str) -> None:
        """Count a request part the proxy could not read (it is decided as if absent); journal each kind once."""
        self.events["request-unparsable"] += 1
        self.events_total["request-unparsable"] += 1
        if kind not in self._unparsable_seen:
            self._unparsable_seen.add(kind)
            self.journal.append("request-unparsable", kind=kind, request=ident.as_dict())

    def note(self, event: str, **fields: Any) -> None:
        """Count and journal a proxy event that is not an injection (e.g. an upstream loss)."""
        self.events[event] += 1
        self.events_total[event] += 1
        self.journal.append(event, **fields)

    # --- stats ------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Requests, per-rule counters of the active activation, injections per rule and kind."""
        rules: dict[str, dict[str, int]] = {}
        active = None
        if self.active is not None:
            engine = self.active.engine
            active = {"profile": engine.profile.name, "epoch": engine.epoch}
            for rule, counts in engine.counters().items():
                base = self._baseline.get((engine.epoch, rule), {})
                rules[rule] = {k: v - base.get(k, 0) for k, v in counts.items()}
        return {
            "requests": self.requests - self._requests_baseline,
            "requestsByResource": dict(sorted(
                (f"{verb} {resource}" + (" (sendInitialEvents)" if initial else ""), n)
                for (verb, resource, initial), n in self.requests_by.items())),
            "active": active,
            "rules": rules,
            "injections": [
                {"profile": p, "rule": r, "fault": f, "count": n}
                for (p, r, f), n in sorted(self.injections.items())
            ],
            "injectionsByFault": dict(sorted(self.by_fault.items())),
            "injectionsTotal": sum(self.by_fault.values()),
            "events": dict(sorted(self.events.items())),
            "bindsTotal": {"succeeded": self.binds["succeeded"], "failed": self.binds["failed"]},
            "connections": self.connections.as_dict(),
        }

    def reset_stats(self) -> None:
        """Zero the counters shown by stats; the engine's own state (maxInjections…) is kept."""
        self._requests_baseline = self.requests
        self.requests_by.clear()
        self.injections.clear()
        self.by_fault.clear()
        self.events.clear()
        if self.active is not None:
            engine = self.active.engine
            self._baseline = {(engine.epoch, r): c for r, c in engine.counters().items()}
