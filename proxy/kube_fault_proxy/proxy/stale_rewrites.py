"""What a `staleList` read is sent as instead, and what its answer reads back as: the query at a past revision, a
GET as the LIST of its one object, a WatchList's initial events read from the LIST at that revision (paged), the
BOOKMARK that ends them. Pure functions on paths, queries and bodies; the stale views' addons send what they make
(`proxy/mitm/stale_reads.py`)."""

from __future__ import annotations

import json
from urllib.parse import urlencode

from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.requests.status import JSON, Reply, status_reply

REWRITTEN = frozenset({"resourceVersion", "resourceVersionMatch", "continue"})


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
