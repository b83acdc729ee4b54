"""stallConnection: a client's whole connection stops answering, its HTTP/2 PINGs included.

What a frozen apiserver, or a network path that drops everything without a reset, looks like to a client: the TCP
connection stays up, and nothing comes back. No stream fails and no FIN arrives, so only the client's own clocks can
notice: in client-go, the HTTP/2 health check (`ReadIdleTimeout` 30 s: no frame read for that long sends a PING;
`PingTimeout` 15 s: no answer to it closes the connection) and the requests' own timeouts. From the request that
triggers it, the proxy reads nothing from the connection and sends nothing on it (what it would have sent is held,
in order); the apiserver side goes on. After `for` the connection heals, as a path does when it comes back: the
held bytes go out in order and what the client sent meanwhile is read. When the client closes the connection
first (its health check gave up), the stall ends there, and what was held either way is dropped: a request the
client gave up on never reaches the apiserver.
"""

from __future__ import annotations

import random
from typing import Any, ClassVar, Self

from pydantic import Field, model_validator

from kube_fault_proxy.proxy.faults.base import Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import Plan, StallClient
from kube_fault_proxy.proxy.faults.stall_stream import MAX_STALL_SECONDS
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.schema.strict import NON_ZERO_DURATION, Duration


class StallConnection(FaultSpec):
    """The connection that carries the matching request goes silent both ways for `for` (its PINGs unanswered),
    then heals; or ends sooner when the client closes it. The request itself is forwarded, its answer held."""

    kind: ClassVar[str] = "stallConnection"
    traits: ClassVar[Traits] = Traits(acts_on="any")
    search_group: ClassVar[str] = "connection"
    searched_by_default: ClassVar[bool] = False  # a search draws it only when named: earlier draws stay as they were
    weaker: ClassVar[str | None] = "resetUpstream"
    for_: Duration = Field(
        alias="for", description="how long the connection stays silent both ways, at most 1h (client-go's health "
                                 "check closes it after about 45s)", json_schema_extra=NON_ZERO_DURATION)

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        return {"for": rng.choice(["10s", "60s"])}

    @model_validator(mode="after")
    def _bounded(self) -> Self:
        if not 0 < self.for_ <= MAX_STALL_SECONDS:
            raise ValueError(f"stallConnection: for must be longer than 0s and at most {MAX_STALL_SECONDS:g}s")
        return self

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        return Plan(before=(StallClient(self.for_),))
