"""watchList: the WatchList protocol broken at its initial-events-end bookmark, one mode at a time."""

from __future__ import annotations

import json
import random

import pytest
from kube_fault_proxy.proxy.faults import Fault
from kube_fault_proxy.proxy.faults.plan import EditEvents
from kube_fault_proxy.proxy.faults.watch_list import WatchList, WatchListEditor, unannotated
from kube_fault_proxy.proxy.requests.identity import parse_untrusted
from kube_fault_proxy.proxy.requests.watch import EventStream, parse_event
from pydantic import ValidationError


class Clock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def added(name: str, rv: int) -> bytes:
    return json.dumps({"type": "ADDED", "object": {"kind": "Pod", "metadata": {"name": name, "namespace": "ns",
                                                                               "resourceVersion": str(rv)}}},
                      separators=(",", ":")).encode() + b"\n"


def bookmark(rv: int, annotated: bool = True, other: bool = False) -> bytes:
    annotations = {**({"k8s.io/initial-events-end": "true"} if annotated else {}), **({"a": "b"} if other else {})}
    meta: dict[str, object] = {"resourceVersion": str(rv), **({"annotations": annotations} if annotations else {})}
    return json.dumps({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": meta}},
                      separators=(",", ":")).encode() + b"\n"


# A WatchList as kube-apiserver streams it: three pods, the annotated bookmark, then two live events.
STREAM = [added("p0", 5), added("p1", 6), added("p2", 7), bookmark(7), added("p3", 8), added("p4", 9)]


def kinds(lines: list[bytes]) -> list[str]:
    out = []
    for line in lines:
        event = parse_event(line)
        assert event is not None, line
        out.append(f"{event.type} {event.name}" + (" end" if event.initial_events_end else ""))
    return out


def run(editor: WatchListEditor, lines: list[bytes] = STREAM) -> list[bytes]:
    stream = EventStream(editor.edit)
    out: list[bytes] = []
    for line in lines:
        out += stream.feed(line)
    return out


def watchlist(query: str = "watch=1&sendInitialEvents=true&allowWatchBookmarks=true") -> object:
    return parse_untrusted("GET", "/api/v1/pods", query, "", None, "", "")


def test_it_takes_only_a_watchlist() -> None:
    spec = WatchList(mode="withhold")
    assert spec.applies_to(watchlist())  # type: ignore[arg-type]
    assert not spec.applies_to(watchlist("watch=1&resourceVersion=5"))  # type: ignore[arg-type]
    assert not spec.applies_to(watchlist("sendInitialEvents=true"))  # type: ignore[arg-type]
    assert not spec.applies_to(watchlist(""))  # type: ignore[arg-type]
    [step] = spec.plan(watchlist(), random.Random(1)).before  # type: ignore[arg-type]
    assert isinstance(step, EditEvents) and isinstance(step.editor, WatchListEditor)


def test_withhold_drops_only_the_annotated_bookmark() -> None:
    editor = WatchListEditor("withhold")
    out = run(editor, [*STREAM[:3], bookmark(7, annotated=False), *STREAM[3:]])
    assert kinds(out) == ["ADDED p0", "ADDED p1", "ADDED p2", "BOOKMARK ", "ADDED p3", "ADDED p4"]
    assert editor.records == [{"action": "initial-events-end-withheld", "type": "BOOKMARK", "kind": "Pod",
                               "namespace": "", "name": "", "resourceVersion": "7", "initialEvents": 3}]
    assert editor.at_end() == [] and editor.release() == []


def test_unannotated_sends_the_bookmark_without_its_annotation_only() -> None:
    editor = WatchListEditor("unannotated")
    out = run(editor, [*STREAM[:3], bookmark(7, other=True), *STREAM[4:]])
    assert kinds(out) == ["ADDED p0", "ADDED p1", "ADDED p2", "BOOKMARK ", "ADDED p3", "ADDED p4"]
    sent = json.loads(out[3])
    assert sent["object"]["metadata"] == {"resourceVersion": "7", "annotations": {"a": "b"}}, "other annotations stay"
    assert out[3].endswith(b"\n") and out[3].count(b"\n") == 1
    assert json.loads(unannotated(bookmark(7)))["object"]["metadata"] == {"resourceVersion": "7"}
    assert [r["action"] for r in editor.records] == ["initial-events-end-unannotated"]


def test_delay_holds_the_bookmark_and_what_follows_then_sends_them_in_order() -> None:
    clock = Clock()
    editor = WatchListEditor("delay", seconds=4.0, clock=clock)
    out = run(editor)
    assert kinds(out) == ["ADDED p0", "ADDED p1", "ADDED p2"], "the live events wait behind the bookmark"
    assert editor.next_due() == 14.0
    clock.now = 13.9
    assert editor.tick() == []
    clock.now = 14.0
    assert kinds(editor.tick()) == ["BOOKMARK  end", "ADDED p3", "ADDED p4"]
    assert editor.records == [{"action": "delayed", "reason": "due", "events": 3, "initialEvents": 3,
                               "heldSeconds": 4.0}]
    assert editor.next_due() is None and kinds(run(editor, [added("p5", 10)])) == ["ADDED p5"], "then it streams"


@pytest.mark.parametrize(("how", "reason"), [("at_end", "end"), ("release", "deactivated")])
def test_a_delayed_bookmark_goes_when_the_stream_ends_or_the_fault_is_switched_off(how: str, reason: str) -> None:
    clock = Clock()
    editor = WatchListEditor("delay", seconds=30.0, clock=clock)
    run(editor)
    clock.now += 2.5
    assert kinds(getattr(editor, how)()) == ["BOOKMARK  end", "ADDED p3", "ADDED p4"]
    assert editor.records[-1] == {"action": "delayed", "reason": reason, "events": 3, "initialEvents": 3,
                                  "heldSeconds": 2.5}
    assert editor.at_end() == [] and editor.release() == [], "released once"


def test_truncate_with_an_error_ends_the_stream_after_n_initial_events() -> None:
    editor = WatchListEditor("truncate", after_events=2, error="expired")
    out = run(editor)
    assert kinds(out)[:2] == ["ADDED p0", "ADDED p1"] and len(out) == 3
    error = json.loads(out[2])
    assert error["type"] == "ERROR" and error["object"]["code"] == 410
    assert editor.records == [{"action": "cut", "type": "ADDED", "kind": "Pod", "namespace": "ns", "name": "p1",
                               "resourceVersion": "6", "initialEvents": 2, "error": "expired"}]
    assert not editor.cut_connection and run(editor, [added("p9", 20)]) == [], "nothing more of the watch"


def test_truncate_without_an_error_cuts_the_connection() -> None:
    editor = WatchListEditor("truncate", after_events=1)
    stream = EventStream(editor.edit)
    assert kinds(stream.feed(STREAM[0])) == ["ADDED p0"] and editor.cut_connection
    assert stream.feed(b"".join(STREAM[1:])) == []
    assert editor.records[0]["error"] == "none" and editor.records[0]["initialEvents"] == 1


def test_truncate_after_more_events_than_the_list_has_ends_at_the_bookmark() -> None:
    editor = WatchListEditor("truncate", after_events=50, error="internal")
    out = run(editor)
    assert kinds(out)[:3] == ["ADDED p0", "ADDED p1", "ADDED p2"] and len(out) == 4
    assert json.loads(out[3])["object"]["code"] == 500, "the bookmark never comes: the ERROR in its place"
    assert editor.records[0]["initialEvents"] == 3 and editor.records[0]["type"] == "BOOKMARK"


def test_plain_bookmarks_and_errors_before_the_end_are_not_counted_and_pass() -> None:
    editor = WatchListEditor("truncate", after_events=2, error="internal")
    error = b'{"type":"ERROR","object":{"kind":"Status","code":500}}\n'
    out = run(editor, [added("p0", 5), bookmark(5, annotated=False), b"not json\n", added("p1", 6), error])
    assert kinds(out[:2]) == ["ADDED p0", "BOOKMARK "] and out[2] == b"not json\n"
    assert json.loads(out[3])["object"]["metadata"]["name"] == "p1" and json.loads(out[4])["object"]["code"] == 500
    assert len(out) == 5 and editor.records[0]["initialEvents"] == 2


def test_each_mode_takes_its_own_settings_and_no_other() -> None:
    Fault.model_validate({"watchList": {"mode": "delay", "seconds": 3}})
    Fault.model_validate({"watchList": {"mode": "truncate", "afterEvents": 3, "error": "expired"}})
    for bad, message in (({"mode": "delay"}, "mode delay needs seconds"),
                         ({"mode": "truncate"}, "mode truncate needs afterEvents"),
                         ({"mode": "withhold", "seconds": 2}, "mode withhold takes no seconds"),
                         ({"mode": "delay", "seconds": 2, "error": "expired"}, "mode delay takes no error"),
                         ({"mode": "unannotated", "afterEvents": 2}, "mode unannotated takes no afterEvents")):
        with pytest.raises(ValidationError, match=message):
            Fault.model_validate({"watchList": bad})
    with pytest.raises(ValidationError, match="mode"):
        Fault.model_validate({"watchList": {"mode": "drop"}})
    with pytest.raises(ValidationError):
        Fault.model_validate({"watchList": {}})


def test_the_search_draws_every_mode_with_its_settings() -> None:
    from kube_fault_proxy.proxy.faults.base import Draw

    drawn = [WatchList.draw(random.Random(seed), Draw()) for seed in range(60)]
    assert {d["mode"] for d in drawn} == {"withhold", "unannotated", "delay", "truncate"}
    for d in drawn:
        WatchList.model_validate(d)
    assert WatchList.traits.watch_requests == "relist" and WatchList.traits.edits_events
