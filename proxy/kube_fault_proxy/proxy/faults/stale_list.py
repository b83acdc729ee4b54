"""staleList: a LIST (or a GET of one object, or a WatchList) answered by the apiserver itself from a past revision.

kube-apiserver serves a LIST at an exact past resourceVersion (`resourceVersionMatch=Exact`) for as long
as etcd has not compacted it, so the proxy only rewrites the query: nothing is made up. A GET becomes
the LIST of that one object (`fieldSelector=metadata.name=NAME`), answered as the GET would be: the
object, or 404 if it did not exist at that revision. A WatchList (a watch with `sendInitialEvents=true`,
how client-go 1.36 informers relist) gets an `ADDED` event per object of the LIST at that revision
(read by the proxy, paged), the `k8s.io/initial-events-end` BOOKMARK at it, then the apiserver's own
watch from it: the writes after it replay in order, as after a reconnect to a lagging apiserver.

Here: the schema and the plan (a `ServeStale` step). What is sent instead is `proxy/stale_rewrites.py`'s, and the
stale views' addons (`proxy/mitm/stale_reads.py`) send it, with the revision log (`proxy/stale_views.py`)."""

from __future__ import annotations

import random
from typing import Annotated, Any, ClassVar, Self

from pydantic import ConfigDict, Field, model_validator

from kube_fault_proxy.proxy.faults.base import Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import Plan, ServeStale
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.schema.strict import exactly_one_of


def stale_readable(ident: RequestIdentity) -> bool:
    """A read a past revision can answer: a LIST (its first page), a GET of one object, a WatchList."""
    if not ident.is_resource or ident.subresource:
        return False
    if ident.watch:  # a WatchList (sendInitialEvents=true): its initial state from the past revision
        return ident.initial_events
    if ident.verb == "list":
        return not ident.continued  # a later page is read at its token's revision already
    return ident.verb == "get" and bool(ident.name)


class StaleList(FaultSpec):
    """Exactly one of lagSeconds (the revision the proxy saw that long ago) or lagWrites (the revision
    that many writes of the resource back). With none old enough known, the request passes unchanged."""

    model_config = ConfigDict(json_schema_extra=exactly_one_of("lagSeconds", "lagWrites"))
    kind: ClassVar[str] = "staleList"
    traits: ClassVar[Traits] = Traits(acts_on="watch", watch_requests="relist", stale_view=True)
    search_group: ClassVar[str] = "view"
    searched_by_default: ClassVar[bool] = False
    lagSeconds: Annotated[float, Field(gt=0, le=600)] | None = Field(
        None, description="the newest revision the proxy saw at least this many seconds ago")
    lagWrites: Annotated[int, Field(ge=1, le=1000)] | None = Field(
        None, description="the revision that hides the last N writes of the resource the proxy saw")

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        """Within the history the rig's etcd keeps (10 minutes) and the writes a trial makes."""
        if rng.random() < 0.5:
            return {"lagSeconds": float(rng.choice([1, 2, 5, 10]))}
        return {"lagWrites": rng.choice([1, 5, 20, 100])}

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.lagSeconds is None) == (self.lagWrites is None):
            raise ValueError("staleList needs exactly one of lagSeconds, lagWrites")
        return self

    def applies_to(self, ident: RequestIdentity) -> bool:
        return stale_readable(ident)

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        return Plan(before=(ServeStale(self.lagSeconds, self.lagWrites),))
