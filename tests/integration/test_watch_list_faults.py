"""watchList on the wire: a real `serve` before the TLS + HTTP/2 stand-in, whose WatchList ends its initial events with
the annotated BOOKMARK as kube-apiserver does (`initialEvents=N`)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from tests.support.control import activate, injections
from tests.support.processes import Started

PODS = {"verbs": ["watch"], "resources": ["pods"]}
WATCHLIST = {"watch": "1", "sendInitialEvents": "true", "allowWatchBookmarks": "true",
             "resourceVersionMatch": "NotOlderThan", "initialEvents": "3", "n": "5", "interval": "0.05"}


def seen(event: dict[str, Any]) -> str:
    meta = event["object"]["metadata"]
    end = ["end"] if (meta.get("annotations") or {}).get("k8s.io/initial-events-end") == "true" else []
    return " ".join([event["type"], *filter(None, [meta.get("name", "")]), *end])


def stream(client: httpx.Client, **params: str) -> list[dict[str, Any]]:
    """The WatchList's events, asked for plain (the stand-in gzips a WatchList a member per event for a client that
    accepts gzip, as kube-apiserver 1.37 does, and httpx decodes only the first member)."""
    with client.stream("GET", "/api/v1/pods", params={**WATCHLIST, **params},
                       headers={"accept-encoding": "identity"}) as s:
        return [json.loads(line) for line in s.iter_lines() if line]


def watch_events(control: httpx.Client) -> list[dict[str, Any]]:
    records = control.get("/v1/journal", params={"since": control.headers["x-test-journal-cursor"]}).json()["records"]
    return [r for r in records if r["event"] == "watch-event"]


def test_the_stand_in_ends_a_watch_lists_initial_events_with_the_annotated_bookmark(h2: httpx.Client) -> None:
    assert [seen(e) for e in stream(h2)] == ["ADDED p0", "ADDED p1", "ADDED p2", "BOOKMARK end", "ADDED p3",
                                             "ADDED p4"]


def test_withhold_drops_the_bookmark_of_a_watch_list_and_leaves_a_resumed_watch_alone(
        h2: httpx.Client, control: httpx.Client) -> None:
    activate(control, "withhold", [{"name": "w", "match": PODS, "fault": {"watchList": {"mode": "withhold"}}}])
    assert [seen(e) for e in stream(h2)] == ["ADDED p0", "ADDED p1", "ADDED p2", "ADDED p3", "ADDED p4"]
    resumed = {"watch": "1", "resourceVersion": "99", "allowWatchBookmarks": "true", "initialEvents": "1", "n": "2",
               "interval": "0.05"}
    with h2.stream("GET", "/api/v1/pods", params=resumed) as s:
        plain = [seen(json.loads(line)) for line in s.iter_lines() if line]
    assert plain == ["ADDED p0", "BOOKMARK end", "ADDED p1"], "not a WatchList: the rule does not take it"
    [inject] = injections(control)
    assert inject["fault"] == "watchList" and inject["request"]["sendInitialEvents"] is True
    [edit] = watch_events(control)
    assert (edit["action"], edit["initialEvents"], edit["resourceVersion"], edit["rule"]) == (
        "initial-events-end-withheld", 3, "102", "w")


def test_unannotated_sends_a_plain_bookmark_in_its_place(h2: httpx.Client, control: httpx.Client) -> None:
    activate(control, "plain", [{"name": "u", "match": PODS, "fault": {"watchList": {"mode": "unannotated"}}}])
    events = stream(h2)
    assert [seen(e) for e in events] == ["ADDED p0", "ADDED p1", "ADDED p2", "BOOKMARK", "ADDED p3", "ADDED p4"]
    assert events[3]["object"]["metadata"] == {"resourceVersion": "102"}
    assert [r["action"] for r in watch_events(control)] == ["initial-events-end-unannotated"]


def test_delay_sends_the_bookmark_and_what_follows_late_by_the_proxys_own_timer(
        proxy: Started, control: httpx.Client) -> None:
    activate(control, "late", [{"name": "d", "match": PODS, "fault": {"watchList": {"mode": "delay", "seconds": 1}}}])
    arrived: list[tuple[float, str]] = []
    with httpx.Client(http2=True, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"], timeout=10) as c, \
            c.stream("GET", "/api/v1/pods", params={**WATCHLIST, "n": "4", "linger": "2.5"}) as s:
        t0 = time.monotonic()
        for line in s.iter_lines():
            if line:
                arrived.append((time.monotonic() - t0, seen(json.loads(line))))
    assert [what for _, what in arrived] == ["ADDED p0", "ADDED p1", "ADDED p2", "BOOKMARK end", "ADDED p3"]
    assert all(at < 0.6 for at, _ in arrived[:3]), arrived
    assert all(1.0 <= at <= 1.8 for at, _ in arrived[3:]), "held 1 s from the bookmark, on a quiet stream"
    [delayed] = watch_events(control)
    assert (delayed["action"], delayed["reason"], delayed["events"], delayed["initialEvents"]) == (
        "delayed", "due", 2, 3)
    assert 0.95 <= delayed["heldSeconds"] <= 1.5


def test_truncate_with_an_error_ends_the_initial_events_early(h2: httpx.Client, control: httpx.Client) -> None:
    activate(control, "short", [{"name": "t", "match": PODS,
                                 "fault": {"watchList": {"mode": "truncate", "afterEvents": 2, "error": "expired"}}}])
    events = stream(h2)
    assert [seen(e) for e in events[:2]] == ["ADDED p0", "ADDED p1"] and len(events) == 3
    assert events[2]["type"] == "ERROR" and events[2]["object"]["code"] == 410
    [cut] = watch_events(control)
    assert (cut["action"], cut["initialEvents"], cut["error"], cut["name"]) == ("cut", 2, "expired", "p1")


def test_truncate_without_an_error_cuts_the_clients_connection(proxy: Started, control: httpx.Client) -> None:
    activate(control, "short", [{"name": "t", "match": PODS, "fault": {"watchList": {"mode": "truncate",
                                                                                    "afterEvents": 1}}}])
    got: list[str] = []
    with httpx.Client(http2=True, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"], timeout=10) as c, \
            pytest.raises(httpx.HTTPError), c.stream("GET", "/api/v1/pods", params={**WATCHLIST, "interval": "0.3"}) as s:
        got.extend(seen(json.loads(line)) for line in s.iter_lines() if line)
    assert got == ["ADDED p0"]
    [cut] = watch_events(control)
    assert (cut["action"], cut["initialEvents"], cut["error"]) == ("cut", 1, "none")
