"""cut (proxy.faults.cut): its plans, and its editor ending a watch after a time or a count of events."""

from __future__ import annotations

import json
import random

from kube_fault_proxy.proxy.faults.cut import CutEditor
from kube_fault_proxy.proxy.requests.watch import EventStream

from tests.support.builders import bind
from tests.support.watch_streams import EVENTS, STREAM, run_editor

RNG = random.Random(0)


def test_cut_plans() -> None:
    from kube_fault_proxy.proxy.faults import Cut
    from kube_fault_proxy.proxy.faults.plan import EditEvents, LimitWatch

    assert Cut(afterSeconds=30).plan(bind("p"), RNG).before == (LimitWatch(30),)
    steps = Cut(afterSeconds=5, error="internal").plan(bind("p"), RNG).before
    assert steps[0] == LimitWatch(5) and isinstance(steps[1], EditEvents)
    assert Cut(afterEvents=3).plan(bind("p"), RNG).describe() == "end the watch after 3 events with a connection cut, then forward"


def test_cut_after_events_with_an_error_drops_the_rest() -> None:
    editor = CutEditor(2, "expired")
    out = run_editor(editor)
    assert out[:2] == EVENTS[:2]
    assert json.loads(out[2]) == {"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "too old resource version: injected by kube-fault-proxy", "reason": "Expired", "code": 410}}
    assert len(out) == 3
    assert not editor.cut_connection


def test_cut_after_events_without_an_error_asks_for_a_connection_cut() -> None:
    editor = CutEditor(3, "none")
    stream = EventStream(editor.edit)
    assert stream.feed(STREAM) == EVENTS[:3]
    assert editor.cut_connection


def test_bookmarks_do_not_count_as_events() -> None:
    bookmark = b'{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"9"}}}\n'
    editor = CutEditor(1, "internal")
    out = EventStream(editor.edit).feed(bookmark + EVENTS[0] + EVENTS[1])
    assert out[:2] == [bookmark, EVENTS[0]] and b'"code":500' in out[2] and len(out) == 3


def test_cut_with_an_error_at_the_end_of_the_stream() -> None:
    editor = CutEditor(None, "expired")
    out = run_editor(editor)
    assert out[:4] == EVENTS and b'"reason":"Expired"' in out[4]
