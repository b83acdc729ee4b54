"""failThenCommit: the client gets an error first; the write reaches the apiserver afterwards and commits.

What a client of an overloaded apiserver sees at its request timeout: kube-apiserver answers 504
`Timeout` once its request timeout passes, while the write it was handling still completes in etcd
later. `commitThenFail` only makes "committed, then an error"; here the error comes first and the
commit after it, so a client that reads the object once after the error cannot see a commit that
has not happened yet. The proxy sends the write itself `commitAfterSeconds` later, with the client's
method, path, headers and body (as the proxy's own upstream identity, as every forwarded request),
and journals the apiserver's answer (`late-commit`): committed, or refused (a 409, a 404), either way.
"""

from __future__ import annotations

import random
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import ConfigDict, Field, model_validator

from kube_fault_proxy.proxy.faults.base import Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import CommitLater, Plan, ResetStream, Respond
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.requests.status import status_reply
from kube_fault_proxy.proxy.schema.strict import exactly_one_of

WRITES = frozenset({"create", "update", "patch", "delete"})


class FailThenCommit(FaultSpec):
    """Exactly one of status (an error Status the client gets at once, e.g. 504 Timeout) or reset (its
    stream reset); the write itself is sent to the apiserver commitAfterSeconds later."""

    model_config = ConfigDict(json_schema_extra=exactly_one_of("status", "reset"))
    kind: ClassVar[str] = "failThenCommit"
    traits: ClassVar[Traits] = Traits(acts_on="resent-write")
    search_group: ClassVar[str] = "view"
    searched_by_default: ClassVar[bool] = False
    status: Annotated[int, Field(ge=400, le=599)] | None = Field(
        None, description="the error the client gets first, as a Status with the apiserver's reason for it "
                          "(504: Timeout, as kube-apiserver's own request timeout)")
    # Only `true` (or unset): the schema then refuses `reset: false` without a status, as the validator does.
    reset: Literal[True] | None = Field(None, description="true: the client's stream is reset instead of answered")
    commitAfterSeconds: Annotated[float, Field(ge=0, le=300)] = Field(
        description="how long after the client's error the proxy sends the write to the apiserver")

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        """The apiserver's own request-timeout answer, the write landing after it."""
        first: dict[str, Any] = {"status": 504} if rng.random() < 0.8 else {"reset": True}
        return {**first, "commitAfterSeconds": float(rng.choice([0.5, 1, 3]))}

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.status is None) == (not self.reset):
            raise ValueError("failThenCommit needs exactly one of status, reset (reset: true)")
        return self

    def applies_to(self, ident: RequestIdentity) -> bool:
        return ident.is_resource and ident.verb in WRITES

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        first = ResetStream() if self.reset else Respond(status_reply(self.status or 504, ident))
        return Plan(before=(CommitLater(self.commitAfterSeconds), first))
