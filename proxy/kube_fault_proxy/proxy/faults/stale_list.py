"""staleList: a LIST (or a GET of one object, or a WatchList) answered by the apiserver itself from a past revision.

kube-apiserver serves a LIST at an exact past resourceVersion (`resourceVersionMatch=Exact`) for as long
as etcd has not compacted it, so the proxy only rewrites the query: nothing is made up. A GET becomes
the LIST of that one object (`fieldSelector=metadata.name=NAME`), answered as the GET would be: the
object, or 404 if it did not exist at that revision. A WatchList (a watch with `sendInitialEvents=true`,
how client-go 1.36 informers relist) gets an `ADDED` event per object of the LIST at that revision
(read by the proxy, paged), the `k8s.io/initial-events-end` BOOKMARK at it, then the apiserver's own
watch from it: the writes after it replay in order, as after a reconnect to a lagging apiserver."""

from __future__ import annotations

import json
import random
from typing import Annotated, Any, ClassVar, Self
from urllib.parse import urlencode

from pydantic import ConfigDict, Field, model_validator

from kube_fault_proxy.proxy.faults.base import Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import Plan, ServeStale
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.requests.status import JSON, Reply, status_reply
from kube_fault_proxy.proxy.schema.strict import exactly_one_of

REWRITTEN = frozenset({"resourceVersion", "resourceVersionMatch", "continue"})


class StaleList(FaultSpec):
    """Exactly one of lagSeconds (the revision the proxy saw that long ago) or lagWrites (the revision
    that many writes of the resource back). With none old enough known, the request passes unchanged."""

    model_config = ConfigDict(json_schema_extra=exactly_one_of("lagSeconds", "lagWrites"))
    kind: ClassVar[str] = "staleList"
    traits: ClassVar[Traits] = Traits(acts_on="watch", watch_requests="relist")
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
        if not ident.is_resource or ident.subresource:
            return False
        if ident.watch:  # a WatchList (sendInitialEvents=true): its initial state from the past revision
            return ident.initial_events
        if ident.verb == "list":
            return not ident.continued  # a later page is read at its token's revision already
        return ident.verb == "get" and bool(ident.name)

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        return Plan(before=(ServeStale(self.lagSeconds, self.lagWrites),))


def stale_query(pairs: list[tuple[str, str]], revision: int) -> list[tuple[str, str]]:
    """A LIST's query, asking for exactly this revision (the client's selectors and limit kept)."""
    kept = [(k, v) for k, v in pairs if k not in REWRITTEN]
    return [*kept, ("resourceVersion", str(revision)), ("resourceVersionMatch", "Exact")]


WATCH_REWRITTEN = frozenset({"resourceVersion", "resourceVersionMatch", "sendInitialEvents"})
LIST_KEPT = frozenset({"labelSelector", "fieldSelector"})
PAGE = "500"


def stale_watch_query(pairs: list[tuple[str, str]], revision: int) -> list[tuple[str, str]]:
    """A WatchList's query as a plain watch from this revision (selectors, bookmarks, timeout kept)."""
    return [*[(k, v) for k, v in pairs if k not in WATCH_REWRITTEN], ("resourceVersion", str(revision))]


def page_query(pairs: list[tuple[str, str]], revision: int, token: str | None) -> list[tuple[str, str]]:
    """The query of one page of the LIST a WatchList's initial state is read from (the client's selectors)."""
    kept = [(k, v) for k, v in pairs if k in LIST_KEPT]
    if token is not None:  # a later page: its token carries the revision
        return [*kept, ("limit", PAGE), ("continue", token)]
    return [*kept, ("limit", PAGE), ("resourceVersion", str(revision)), ("resourceVersionMatch", "Exact")]


def initial_events(body: bytes) -> tuple[list[bytes], str, str, str | None] | None:
    """One LIST page's objects as ADDED watch event lines, the list's kind and apiVersion, and the next
    page's token; None if the body is no List."""
    try:
        doc = json.loads(body)
        items, kind, api_version = doc["items"], str(doc["kind"]).removesuffix("List"), str(doc["apiVersion"])
        token = (doc.get("metadata") or {}).get("continue") or None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    if not isinstance(items, list):
        return None
    lines = [_line({"type": "ADDED", "object": {"kind": kind, "apiVersion": api_version,
                                                **{k: v for k, v in item.items() if k not in ("kind", "apiVersion")}}})
             for item in items if isinstance(item, dict)]
    return lines, kind, api_version, token


def initial_events_end(kind: str, api_version: str, revision: int) -> bytes:
    """The BOOKMARK that ends a WatchList's initial events, at this revision (as the apiserver writes it)."""
    return _line({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version, "metadata": {
        "resourceVersion": str(revision), "annotations": {"k8s.io/initial-events-end": "true"}}}})


def _line(event: dict[str, object]) -> bytes:
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def get_as_list(path: str, name: str, revision: int) -> str:
    """The path and query of the LIST that reads one object (GET .../NAME) at this revision."""
    collection = path.rstrip("/").rsplit("/", 1)[0]
    query = [("fieldSelector", f"metadata.name={name}"), ("resourceVersion", str(revision)),
             ("resourceVersionMatch", "Exact")]
    return f"{collection}?{urlencode(query)}"


def single_object(ident: RequestIdentity, body: bytes) -> Reply | None:
    """The GET's answer from the one-object LIST's JSON body: the object (with the kind and apiVersion a
    GET carries), or 404 NotFound if it did not exist then; None if the body is no List."""
    try:
        doc = json.loads(body)
        items = doc["items"]
        kind, api_version = str(doc["kind"]), str(doc["apiVersion"])
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(items, list):
        return None
    for item in items:
        if isinstance(item, dict) and (item.get("metadata") or {}).get("name") == ident.name:
            obj = {"kind": kind.removesuffix("List"), "apiVersion": api_version,
                   **{k: v for k, v in item.items() if k not in ("kind", "apiVersion")}}
            data = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
            return Reply(200, data, (("Content-Type", JSON), ("Cache-Control", "no-cache, private")))
    return status_reply(404, ident)
