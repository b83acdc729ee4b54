"""coalesceEvents (proxy.faults.coalesce_events): a watch's events held for a window, each object's latest
state delivered, resourceVersions in order, bookmarks in place, memory bounded — without sockets."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.proxy.faults.coalesce_events import CoalesceEditor, CoalesceEvents, ObjectSelector, retyped
from kube_fault_proxy.proxy.faults.plan import EditEvents, LimitWatch
from kube_fault_proxy.proxy.requests.identity import parse
from kube_fault_proxy.proxy.requests.watch import EventStream
from mitmproxy.addons import proxyserver
from mitmproxy.test import taddons

from tests.support.builders import profile
from tests.support.mitm import JSON, Clock, Faults, answer, events, exchange, flow, runtime


def ev(kind: str, name: str, rv: int, phase: str = "", uid: str = "", ns: str = "ns") -> bytes:
    obj: dict[str, Any] = {"kind": "Pod", "apiVersion": "v1",
                           "metadata": {"name": name, "namespace": ns, "uid": uid or f"u-{name}",
                                        "resourceVersion": str(rv)}}
    if phase:
        obj["status"] = {"phase": phase}
    return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"


def bookmark(rv: int, initial_end: bool = False) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    return json.dumps({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": meta}},
                      separators=(",", ":")).encode() + b"\n"


def seen(lines: list[bytes]) -> list[tuple[str, str, str, str]]:
    """(type, name, resourceVersion, phase) of each delivered line."""
    out = []
    for line in lines:
        doc = json.loads(line)
        obj = doc["object"]
        out.append((doc["type"], obj["metadata"].get("name", ""), obj["metadata"]["resourceVersion"],
                    (obj.get("status") or {}).get("phase", "")))
    return out


class Watch:
    """One coalesced stream on a clock the test moves."""

    def __init__(self, window: float = 2.0, max_held: int = 1000, objects: ObjectSelector | None = None) -> None:
        self.clock = Clock(100.0)
        self.editor = CoalesceEditor(window, max_held, objects or ObjectSelector(), clock=self.clock)
        self.stream = EventStream(self.editor.edit)

    def feed(self, *lines: bytes, after: float = 0.0) -> list[bytes]:
        self.clock.now += after
        return self.stream.feed(b"".join(lines))

    def end(self) -> list[bytes]:
        return self.stream.end() + self.editor.at_end()


def test_only_the_latest_state_of_each_object_is_delivered_when_the_window_ends() -> None:
    w = Watch(window=2)
    assert w.feed(ev("ADDED", "pending", 10, "Pending"), ev("MODIFIED", "pending", 11, "Pending"),
                  ev("MODIFIED", "pending", 12, "Running")) == [], "held"
    assert w.feed(ev("ADDED", "blink", 13), ev("DELETED", "blink", 14), ev("MODIFIED", "known", 15, "Running"),
                  ev("DELETED", "gone", 16), after=1.0) == []
    out = w.feed(ev("MODIFIED", "known", 20), after=1.5)  # the window is over: what it held, then this one held
    assert seen(out) == [("ADDED", "pending", "12", "Running"),  # never seen before: ADDED, in its latest state
                         ("MODIFIED", "known", "15", "Running"),  # seen before the window: MODIFIED
                         ("DELETED", "gone", "16", "")]  # seen, then deleted; 'blink' was never seen at all
    [record] = w.editor.records
    assert {k: record[k] for k in ("action", "reason", "held", "delivered", "elided", "objects", "heldSeconds")} == {
        "action": "coalesced", "reason": "window", "held": 7, "delivered": 3, "elided": 4, "objects": 4,
        "heldSeconds": 2.5}
    assert seen(w.end()) == [("MODIFIED", "known", "20", "")]
    assert w.editor.records[-1]["reason"] == "end"


def test_a_recreated_object_is_deleted_then_added_by_its_uid() -> None:
    w = Watch()
    w.feed(ev("DELETED", "p", 5, uid="old"), ev("ADDED", "p", 6, uid="new"), ev("MODIFIED", "p", 7, "Running", "new"))
    assert seen(w.end()) == [("DELETED", "p", "5", ""), ("ADDED", "p", "7", "Running")]


def test_bookmarks_keep_their_place_and_only_the_newest_is_delivered() -> None:
    w = Watch()
    w.feed(ev("ADDED", "a", 10), bookmark(11), ev("MODIFIED", "b", 12), ev("MODIFIED", "a", 13), bookmark(15),
           ev("ADDED", "c", 20))
    out = seen(w.end())
    assert out == [("MODIFIED", "b", "12", ""), ("ADDED", "a", "13", ""), ("BOOKMARK", "", "15", ""),
                   ("ADDED", "c", "20", "")]
    assert [int(rv) for _, _, rv, _ in out] == sorted(int(rv) for _, _, rv, _ in out)
    assert (w.editor.records[-1]["bookmarks"], w.editor.records[-1]["bookmarksDropped"]) == (1, 1)


def test_the_initial_events_end_bookmark_is_never_dropped() -> None:
    w = Watch()
    w.feed(ev("ADDED", "a", 3), ev("ADDED", "b", 4), bookmark(9, initial_end=True), bookmark(9),
           ev("MODIFIED", "a", 10))
    out = w.end()
    assert seen(out) == [("ADDED", "b", "4", ""), ("BOOKMARK", "", "9", ""), ("BOOKMARK", "", "9", ""),
                         ("ADDED", "a", "10", "")]
    assert b"initial-events-end" in out[1]


def test_other_objects_are_held_too_and_delivered_as_they_came_in_order() -> None:
    w = Watch(objects=ObjectSelector(names=["p-*"]))
    w.feed(ev("ADDED", "p-1", 1), ev("MODIFIED", "other", 2), ev("MODIFIED", "p-1", 3), ev("MODIFIED", "other", 4))
    assert seen(w.end()) == [("MODIFIED", "other", "2", ""), ("ADDED", "p-1", "3", ""), ("MODIFIED", "other", "4", "")]


def test_an_error_ends_the_window_before_it_passes() -> None:
    w = Watch()
    w.feed(ev("ADDED", "a", 1), ev("MODIFIED", "a", 2))
    error = b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","code":410}}\n'
    out = w.feed(error)
    assert out[-1] == error and seen(out[:-1]) == [("ADDED", "a", "2", "")]
    assert w.editor.records[-1]["reason"] == "error"
    assert w.feed(b"not json\n") == [b"not json\n"]


def test_a_full_window_is_delivered_early_and_memory_stays_bounded() -> None:
    w = Watch(window=60, max_held=3)
    out = w.feed(*(ev("ADDED", f"p{i}", 10 + i) for i in range(7)))
    assert seen(out) == [("ADDED", f"p{i}", str(10 + i), "") for i in range(6)]
    assert [r["reason"] for r in w.editor.records] == ["full", "full"]
    assert w.editor.window is not None and w.editor.window.size == 1
    w.feed(ev("MODIFIED", "p6", 30), ev("MODIFIED", "p6", 31))  # the same object: no more room needed
    assert w.editor.window.size == 1


def test_resource_versions_never_go_back_across_windows_of_a_random_stream() -> None:
    rng = random.Random(4)
    w = Watch(window=1, max_held=5)
    alive: dict[str, bool] = {}
    delivered: list[bytes] = []
    for rv in range(1, 400):
        name = f"p{rng.randrange(12)}"
        if rng.random() < 0.1:
            delivered += w.feed(bookmark(rv), after=rng.random() * 0.3)
            continue
        kind = "DELETED" if alive.get(name) and rng.random() < 0.2 else "MODIFIED" if alive.get(name) else "ADDED"
        alive[name] = kind != "DELETED"
        delivered += w.feed(ev(kind, name, rv), after=rng.random() * 0.3)
    delivered += w.end()
    rvs = [int(rv) for _, _, rv, _ in seen(delivered)]
    assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs)
    # The client's view, built from what it got, ends where the apiserver's did.
    view: dict[str, bool] = {}
    for kind, name, _, _ in seen(delivered):
        if kind == "ADDED":
            assert not view.get(name), name
            view[name] = True
        elif kind == "MODIFIED":
            assert view.get(name), name
        elif kind == "DELETED":
            assert view.pop(name), name
    assert set(view) == {n for n, a in alive.items() if a}


def test_retyped_changes_the_first_bytes_or_re_encodes() -> None:
    assert retyped(ev("MODIFIED", "a", 1), "MODIFIED", "ADDED") == ev("ADDED", "a", 1)
    spaced = b'{ "type": "MODIFIED", "object": {}}\n'
    assert json.loads(retyped(spaced, "MODIFIED", "ADDED")) == {"type": "ADDED", "object": {}}


def test_the_plan_lowers_the_watch_timeout_to_the_window_and_the_schema_is_strict() -> None:
    plan = CoalesceEvents(windowSeconds=2.5).plan(parse("GET", "/api/v1/pods", "watch=1"), random.Random(1))
    assert isinstance(plan.before[0], LimitWatch) and plan.before[0].seconds == 3
    assert isinstance(plan.before[1], EditEvents)
    assert CoalesceEvents(windowSeconds=1).applies_to(parse("GET", "/api/v1/pods", "watch=1"))
    assert not CoalesceEvents(windowSeconds=1).applies_to(parse("GET", "/api/v1/pods"))
    from kube_fault_proxy.proxy.profiles.problems import ProfileError

    for fault, expected in (({}, "coalesceEvents.windowSeconds: required field is missing"),
                            ({"windowSeconds": 0}, "windowSeconds: Input should be greater than 0"),
                            ({"windowSeconds": 1, "maxHeldObjects": 0}, "maxHeldObjects: Input should be greater"),
                            ({"windowSeconds": 1, "objects": {"kinds": ["Pod"]}}, "objects.kinds: unknown field")):
        with pytest.raises(ProfileError) as e:
            profile({"name": "r", "fault": {"coalesceEvents": fault}})
        assert expected in str(e.value), (fault, str(e.value))


def test_the_addon_lowers_the_timeout_and_streams_the_watch_through_the_coalescer(tmp_path: Path) -> None:
    rt = runtime(tmp_path, profile({"name": "c", "match": {"verbs": ["watch"]},
                                    "fault": {"coalesceEvents": {"windowSeconds": 1.5}}}, name="p"))
    rt.activations.activate("p")

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            faults = Faults.of(rt)
            w = flow("GET", "/api/v1/pods?watch=1&timeoutSeconds=300")
            await exchange(faults.chain, w, answer(200, b"", [JSON]))
            assert w.request.query["timeoutSeconds"] == "2", "the apiserver ends it at the window, rounded up"
            assert w.response is not None and callable(w.response.stream)
            assert w.response.stream(ev("ADDED", "a", 1) + ev("MODIFIED", "a", 2, "Running")) == []
            assert seen(list(w.response.stream(b""))) == [("ADDED", "a", "2", "Running")]
            assert faults.views.log.newest(("", "pods")) == 2, "the revision log read the stream as it came"
            [record] = [r for r in events(rt, "watch-event") if r["action"] == "coalesced"]
            assert (record["held"], record["delivered"], record["elided"], record["rule"]) == (2, 1, 1, "c")

    asyncio.run(main())


def test_the_window_is_delivered_at_once_when_its_activation_is_over() -> None:
    w = Watch(window=30)
    assert w.feed(ev("ADDED", "p", 10, "Pending"), ev("MODIFIED", "p", 11, "Running")) == []
    assert seen(w.editor.release()) == [("ADDED", "p", "11", "Running")]
    assert w.editor.records[-1]["reason"] == "deactivated" and w.editor.release() == []
