"""twoViews: two apiservers behind one address, one whose watch cache lags the other's.

Each client connection is pinned to one of two views, the apiserver's current state (view 0) or a lag as
`staleList` has it (view 1), and a client's next connection gets the other view, so its relist after a reconnect
can read an older revision than the last one it saw (kubernetes#97294; #138494, a watch cache more than 3 s
behind).

How connections are pinned (deterministic under the activation's seed and the order requests arrive): the rule's
first client (by its user agent) starts on view `s`, drawn once per rule from `Random("SEED/RULE/views")`, the next
new client on the other, and so on, alternating; each later connection of a client gets the view its previous
connection did not have. A connection keeps its view while it lives.

Here: the schema, the plan (a `PinView` step) and the pins (`ViewPins`, plain data). The stale views' addons
(`proxy/mitm/stale_reads.py`) pin each connection and serve the lagging view's reads as `staleList` serves them."""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Self

from pydantic import ConfigDict, Field, model_validator

from kube_fault_proxy.proxy.faults.base import Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import PinView, Plan, ServeStale
from kube_fault_proxy.proxy.faults.stale_list import StaleList, stale_readable
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.schema.strict import exactly_one_of

MAX_CONNECTIONS = 4096  # pinned connections kept per rule; the oldest forgotten first (a forgotten one is new again)
MAX_CLIENTS = 1024  # clients whose last view is kept per rule


class TwoViews(FaultSpec):
    """Two apiservers behind one address: view 0 is the current state, view 1 lags by exactly one of lagSeconds or
    lagWrites (as staleList's). A client connection is pinned to a view at its first read the rule matches: the
    rule's first client (by user agent) gets view s, drawn from the activation's seed
    (`Random("SEED/RULE/views")`), each next new client the other view in turn; a client's next connection gets
    the view its last one did not have, so a relist after a reconnect can read an older revision than it saw.
    Reads on view 1 are served as staleList serves them; on view 0 they pass unchanged."""

    model_config = ConfigDict(json_schema_extra=exactly_one_of("lagSeconds", "lagWrites"))
    kind: ClassVar[str] = "twoViews"
    # staleList's: it reads the same, a stale view served on relists
    traits: ClassVar[Traits] = Traits(acts_on="watch", watch_requests="relist", stale_view=True)
    search_group: ClassVar[str] = "view"
    searched_by_default: ClassVar[bool] = False
    lagSeconds: Annotated[float, Field(gt=0, le=600)] | None = Field(
        None, description="view 1: the newest revision the proxy saw at least this many seconds ago")
    lagWrites: Annotated[int, Field(ge=1, le=1000)] | None = Field(
        None, description="view 1: the revision that hides the last N writes of the resource the proxy saw")

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        """The lagging view's lag, from staleList's ranges."""
        return StaleList.draw(rng, where)

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.lagSeconds is None) == (self.lagWrites is None):
            raise ValueError("twoViews needs exactly one of lagSeconds, lagWrites (the lagging view's lag)")
        return self

    def applies_to(self, ident: RequestIdentity) -> bool:
        return stale_readable(ident)

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        lag = self.model_dump(include={"lagSeconds", "lagWrites"}, exclude_none=True)
        return Plan(before=(PinView((None, ServeStale(self.lagSeconds, self.lagWrites)), ({}, lag)),))


@dataclass(frozen=True, slots=True)
class Pinned:
    """A connection's view: its index (0 or 1), whether this request pinned it (the connection's first), and the
    count of the client's connections this rule pinned, this one included."""

    view: int
    new: bool
    connections: int


@dataclass(slots=True)
class _RulePins:
    first: int  # the first client's view
    clients: OrderedDict[str, tuple[int, int]] = field(default_factory=OrderedDict)  # client: last view, connections
    connections: OrderedDict[str, int] = field(default_factory=OrderedDict)  # connection id: view
    clients_seen: int = 0


class ViewPins:
    """Which view each connection has, per rule of the active activation; plain data, bounded."""

    def __init__(self) -> None:
        self._epoch: tuple[str, int] | None = None
        self._rules: dict[str, _RulePins] = {}

    def pin(self, profile: str, epoch: int, seed: int, rule: str, client: str, connection: str) -> Pinned:
        """The view of this connection (of this client, by its user agent) under this rule."""
        if self._epoch != (profile, epoch):  # a new activation starts its pins afresh
            self._epoch, self._rules = (profile, epoch), {}
        pins = self._rules.get(rule)
        if pins is None:
            pins = self._rules[rule] = _RulePins(random.Random(f"{seed}/{rule}/views").randrange(2))
        view = pins.connections.get(connection)
        if view is not None:
            return Pinned(view, False, pins.clients.get(client, (view, 1))[1])
        last = pins.clients.get(client)
        if last is None:
            view, count = (pins.first + pins.clients_seen) % 2, 1
            pins.clients_seen += 1
        else:
            view, count = 1 - last[0], last[1] + 1
            pins.clients.move_to_end(client)
        pins.clients[client] = (view, count)
        pins.connections[connection] = view
        for kept, cap in ((pins.clients, MAX_CLIENTS), (pins.connections, MAX_CONNECTIONS)):
            while len(kept) > cap:
                kept.popitem(last=False)
        return Pinned(view, True, count)
