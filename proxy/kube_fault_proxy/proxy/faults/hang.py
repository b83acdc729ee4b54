"""hang: hold the request unanswered, then time out like the apiserver (504) or reset."""

from __future__ import annotations

import random
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from kube_fault_proxy.proxy.faults.base import Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import Plan, ResetStream, Respond, Step, Wait
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.requests.status import status_reply

UNTIL_CLIENT_GIVES_UP = 3600.0


class Hang(FaultSpec):
    """No answer for `seconds` (default: until the client gives up, at most an hour)."""

    kind: ClassVar[str] = "hang"
    traits: ClassVar[Traits] = Traits(acts_on="request", duration="seconds")
    search_group: ClassVar[str] = "request"
    weaker: ClassVar[str | None] = "abort"
    seconds: Annotated[float, Field(gt=0, le=UNTIL_CLIENT_GIVES_UP)] | None = Field(
        None, description="how long nothing is answered (default: until the client gives up, at most 1h)")
    then: Literal["timeout", "reset"] = Field(
        "timeout", description="timeout: a 504 Timeout Status like the apiserver's; reset: reset the stream")

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        return {"seconds": float(rng.choice([1, 3, 5])), "then": rng.choice(["timeout", "reset"])}

    def steps(self, ident: RequestIdentity) -> tuple[Step, ...]:
        """The wait and what ends it."""
        wait = Wait(self.seconds or UNTIL_CLIENT_GIVES_UP, until_client_gone=True)
        end: Step = ResetStream() if self.then == "reset" else Respond(status_reply(504, ident))
        return (wait, end)

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        return Plan(before=self.steps(ident))
