"""crashPoint: the apiserver commits a write, and its answer is held: the moment to crash the scheduler.

Sieve's intermediate states: a controller that crashes between two of its writes restarts from
whatever the cluster holds. The write is forwarded; when the apiserver answers 2xx (committed), the
proxy journals a `crash-point` record and holds the answer for `holdSeconds` before it relays it (or
drops it, if the client has gone meanwhile). The rig `kill -9`s the scheduler under test on that
record and starts it again; outside the rig the record and the held answer are what a user acts on.
A non-2xx answer committed nothing: it passes at once and the rule's turn is given back.

`kill` makes the crash correlated (Welder's tests kill every interacting controller at once): each named
component dies at the same committed write, and each is started again after its own delay. The record carries
the list; the rig kills them all within one poll of it. Unset: the rig's default, the scheduler alone.
"""

from __future__ import annotations

import random
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator

from kube_fault_proxy.proxy.faults.base import Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import HoldAnswer, Plan
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.schema.strict import StrictModel

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


# What a crash point may kill: the scheduler under test (kube-scheduler or YuniKorn), kube-controller-manager.
COMPONENTS = ("scheduler", "kube-controller-manager")


class CrashKill(StrictModel):
    """One component killed at the crash point, and when it starts again."""

    component: Literal["scheduler", "kube-controller-manager"] = Field(
        description="scheduler (the scheduler under test) or kube-controller-manager")
    restartAfterSeconds: Annotated[float, Field(ge=0, le=600)] = Field(
        description="start the same build again this long after the kill (0-600 s)")


class CrashPoint(FaultSpec):
    """Hold the committed answer of a matched write for `holdSeconds`, then relay it (or drop it if the
    client is gone). Bounded: without `when.maxInjections` a rule holds one answer."""

    kind: ClassVar[str] = "crashPoint"
    # the trial kills the target on its record; the target relists as it starts again
    traits: ClassVar[Traits] = Traits(acts_on="write", reopens="relist", at_a_count=True, rule_probability=False,
                                      duration="holdSeconds", trial_needs=frozenset({"kill"}))
    search_group: ClassVar[str] = "view"
    searched_by_default: ClassVar[bool] = False
    default_max_injections: ClassVar[int | None] = 1
    holdSeconds: Annotated[float, Field(gt=0, le=600)] = Field(
        30.0, description="how long the committed answer is held before it is relayed (0-600 s)")
    kill: list[CrashKill] = Field(
        default_factory=list, max_length=len(COMPONENTS),
        description="components killed together at the crash point, each restarted after its own delay (unset: "
                    "the rig kills the scheduler alone, restarted as its step or trial says)")

    @field_validator("kill")
    @classmethod
    def _each_component_once(cls, kill: list[CrashKill]) -> list[CrashKill]:
        names = [k.component for k in kill]
        if len(set(names)) != len(names):
            raise ValueError(f"a component is named twice: {', '.join(names)}")
        return kill

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        """The trial kills the scheduler at once, and its answer is dropped with it."""
        return {"holdSeconds": float(rng.choice([2, 5, 10]))}

    @classmethod
    def companion(cls, rng: random.Random) -> dict[str, Any]:
        """A restart, drawn as any crash point."""
        return cls.draw(rng, Draw())

    def applies_to(self, ident: RequestIdentity) -> bool:
        return ident.is_resource and ident.verb in WRITE_VERBS

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        kill = tuple((k.component, k.restartAfterSeconds) for k in self.kill)
        return Plan(after=(HoldAnswer(self.holdSeconds, kill),), after_only_if_committed=True,
                    refund_if_not_committed=True)
