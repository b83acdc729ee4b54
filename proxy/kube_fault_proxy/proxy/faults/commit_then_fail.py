"""commitThenFail: forward, let the apiserver commit, then fail the client (the split-brain case)."""

from __future__ import annotations

import random
from typing import Any, ClassVar, Self

from pydantic import ConfigDict, Field, model_validator

from kube_fault_proxy.proxy.faults.abort import Abort
from kube_fault_proxy.proxy.faults.base import Draw, FaultSpec
from kube_fault_proxy.proxy.faults.hang import Hang
from kube_fault_proxy.proxy.faults.plan import Plan
from kube_fault_proxy.proxy.faults.reset import Reset
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.schema.strict import exactly_one_of


class CommitThenFail(FaultSpec):
    """Exactly one of abort, reset or hang, performed after the apiserver has answered."""

    model_config = ConfigDict(json_schema_extra=exactly_one_of("abort", "reset", "hang"))
    kind: ClassVar[str] = "commitThenFail"
    traits: ClassVar[Traits] = Traits(acts_on="write")
    search_group: ClassVar[str] = "request"
    weaker: ClassVar[str | None] = "abort"
    abort: Abort | None = Field(None, description="after the commit, answer this error instead")
    reset: Reset | None = Field(None, description="after the commit, reset the stream instead of answering")
    hang: Hang | None = Field(None, description="after the commit, hold the answer back")

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        inner = rng.choice(["abort", "reset", "hang"])
        return {inner: {"status": rng.choice([500, 504])} if inner == "abort" else
                {"seconds": 1.0} if inner == "hang" else {}}

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        chosen = [k for k in ("abort", "reset", "hang") if getattr(self, k) is not None]
        if len(chosen) != 1:
            raise ValueError(
                "commitThenFail needs exactly one of abort, reset, hang"
                + (f" (got {', '.join(chosen)})" if chosen else "")
            )
        return self

    def applies_to(self, ident: RequestIdentity) -> bool:
        return not ident.watch

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        inner = self.abort or self.reset or self.hang
        assert inner is not None
        return Plan(after=inner.plan(ident, rng).before, after_only_if_committed=True)
