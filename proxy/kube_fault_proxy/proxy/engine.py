"""The decision engine for one activation of one profile: pure, seeded, clock passed in."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from kube_fault_proxy.proxy.faults.base import FaultSpec
from kube_fault_proxy.proxy.faults.plan import Plan
from kube_fault_proxy.proxy.profiles.match import Check, compile_selector
from kube_fault_proxy.proxy.profiles.profile import FaultProfile, Rule
from kube_fault_proxy.proxy.requests.identity import RequestIdentity


@dataclass(frozen=True, slots=True)
class Decision:
    """One injection: which profile, activation epoch and rule decided it, and the plan."""

    profile: str
    epoch: int
    seed: int
    rule: str
    fault: str
    plan: Plan
    match: int
    injection: int

    def stamp(self) -> dict[str, object]:
        """The fields every journal record of this decision carries."""
        return {
            "profile": self.profile,
            "epoch": self.epoch,
            "seed": self.seed,
            "rule": self.rule,
            "fault": self.fault,
            "match": self.match,
            "injection": self.injection,
        }


@dataclass(slots=True)
class _RuleState:
    rule: Rule
    spec: FaultSpec
    matches: Check
    trigger: Check | None
    rng: random.Random
    matched: int = 0
    eligible: int = 0
    injected: int = 0
    triggered: int = 0
    per_object: Counter[str] = field(default_factory=Counter)


class Engine:
    """Rules checked in order; the first one that decides to inject wins."""

    def __init__(self, profile: FaultProfile, epoch: int, seed: int, started_at: float) -> None:
        self.profile = profile
        self.epoch = epoch
        self.seed = seed
        self.started_at = started_at
        self._rules = [
            _RuleState(
                rule=r,
                spec=r.fault.spec,
                matches=compile_selector(r.match),
                trigger=compile_selector(r.when.trigger.match) if r.when.trigger else None,
                # Each rule draws from its own stream, so traffic for one rule never
                # shifts another rule's decisions.
                rng=random.Random(f"{seed}/{r.name}"),
            )
            for r in profile.spec.rules
        ]
        self._triggered = [s for s in self._rules if s.trigger is not None and not self._on_answers(s)]
        self._answered = [s for s in self._rules if s.trigger is not None and self._on_answers(s)]
        # expire with failRelist: the next LIST of the same resource fails too (key → rule state)
        self._relist_follow_ups: dict[tuple[str, str, str], _RuleState] = {}

    @staticmethod
    def _on_answers(s: _RuleState) -> bool:
        return s.rule.when.trigger is not None and s.rule.when.trigger.answered

    @property
    def counts_answers(self) -> bool:
        """Whether a rule's trigger counts answered requests (see `answered`)."""
        return bool(self._answered)

    def answered(self, ident: RequestIdentity, status: int) -> None:
        """The apiserver answered a request: feed the triggers that count 2xx answers."""
        if 200 <= status < 300:
            for s in self._answered:
                assert s.trigger is not None
                if s.trigger(ident):
                    s.triggered += 1

    def decide(self, ident: RequestIdentity, now: float) -> Decision | None:
        """The decision for one request, or None to pass it through untouched."""
        for s in self._triggered:
            assert s.trigger is not None
            if s.trigger(ident):
                s.triggered += 1
        if self._relist_follow_ups and ident.relist:
            follow_up = self._relist_follow_up(ident)
            if follow_up is not None:
                return follow_up
        elapsed = now - self.started_at
        for s in self._rules:
            if not s.spec.applies_to(ident) or not s.matches(ident):
                continue
            s.matched += 1
            if self._eligible(s, ident, elapsed) and self._rolls(s):
                s.injected += 1
                s.per_object[ident.object_key] += 1
                if s.spec.follows_up_relist:
                    self._relist_follow_ups[(ident.group, ident.resource, ident.namespace)] = s
                return Decision(
                    profile=self.profile.name,
                    epoch=self.epoch,
                    seed=self.seed,
                    rule=s.rule.name,
                    fault=s.spec.kind,
                    plan=s.spec.plan(ident, s.rng),
                    match=s.matched,
                    injection=s.injected,
                )
        return None

    def refund(self, decision: Decision, ident: RequestIdentity) -> None:
        """A decided injection that did not happen (a crash point whose write committed nothing): the
        rule's turn is given back, so the next matching write that commits is the one."""
        if decision.epoch != self.epoch:
            return
        for s in self._rules:
            if s.rule.name == decision.rule and s.injected > 0:
                s.injected -= 1
                s.per_object[ident.object_key] -= 1
                return

    def _relist_follow_up(self, ident: RequestIdentity) -> Decision | None:
        s = self._relist_follow_ups.pop((ident.group, ident.resource, ident.namespace), None)
        if s is None:
            return None
        return Decision(self.profile.name, self.epoch, self.seed, s.rule.name, s.spec.kind,
                        s.spec.relist_plan(ident), s.matched, s.injected)

    @staticmethod
    def _eligible(s: _RuleState, ident: RequestIdentity, elapsed: float) -> bool:
        when = s.rule.when
        start = when.after or 0.0
        if elapsed < start or (when.for_ is not None and elapsed >= start + when.for_):
            return False
        if when.trigger is not None and s.triggered < when.trigger.count:
            return False
        if when.afterMatches is not None and s.matched <= when.afterMatches:
            return False
        s.eligible += 1
        if when.every is not None and s.eligible % when.every:
            return False
        limit = when.maxInjections if when.maxInjections is not None else s.spec.default_max_injections
        if limit is not None and s.injected >= limit:
            return False
        return not (
            when.perObjectMax is not None and s.per_object[ident.object_key] >= when.perObjectMax
        )

    @staticmethod
    def _rolls(s: _RuleState) -> bool:
        p = s.rule.probability
        return p >= 1.0 or (p > 0.0 and s.rng.random() < p)

    def counters(self) -> dict[str, dict[str, int]]:
        """Per rule: requests matched, eligible, injected, and trigger requests seen."""
        return {
            s.rule.name: {
                "matched": s.matched,
                "eligible": s.eligible,
                "injected": s.injected,
                "triggerSeen": s.triggered,
            }
            for s in self._rules
        }
