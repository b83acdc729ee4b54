"""dropEvents (proxy.faults.drop_events): chosen events never reach the client, each drop recorded, seeded."""

from __future__ import annotations

import random

from kube_fault_proxy.proxy.faults.drop_events import DropEditor
from kube_fault_proxy.proxy.requests.watch import EventSelector, EventStream

from tests.support.watch_streams import EVENTS, ev, run_editor

RNG = random.Random(0)


def test_drop_selected_events_and_record_them() -> None:
    editor = DropEditor(EventSelector(types=["MODIFIED"]), 1.0, random.Random(1))
    assert run_editor(editor) == [EVENTS[0], EVENTS[2], EVENTS[3]]
    assert editor.records == [{"action": "dropped", "type": "MODIFIED", "kind": "Pod", "namespace": "ns",
                               "name": "a", "resourceVersion": "2"}]


def test_drop_with_a_probability_is_seeded() -> None:
    lines = [ev("MODIFIED", f"p{i}", i) for i in range(200)]

    def kept(seed: int) -> list[bytes]:
        return EventStream(DropEditor(EventSelector(), 0.5, random.Random(seed)).edit).feed(b"".join(lines))

    assert kept(3) == kept(3) != kept(4)
    assert 60 < len(kept(3)) < 140


def _initial_events(end_annotated: bool = True) -> list[bytes]:
    """A WatchList's initial events (sendInitialEvents): two ADDED, the BOOKMARK that ends them, then a MODIFIED."""
    meta = '{"resourceVersion":"3"' + (',"annotations":{"k8s.io/initial-events-end":"true"}' if end_annotated else "")
    end = ('{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":' + meta + '}}}\n').encode()
    return [ev("ADDED", "a", 1), ev("ADDED", "b", 2), end, ev("MODIFIED", "a", 4)]


def test_the_bookmark_ending_the_initial_events_is_dropped_only_when_bookmarks_are_named() -> None:
    """Without it a client-go informer never syncs (it waits until its watch times out): a broken server, which
    only a rule naming BOOKMARK asks for."""
    lines = _initial_events()
    every = DropEditor(EventSelector(), 1.0, random.Random(1))
    assert EventStream(every.edit).feed(b"".join(lines)) == [lines[2]]  # all dropped but the initial-events-end
    assert [r["type"] for r in every.records] == ["ADDED", "ADDED", "MODIFIED"]
    named = DropEditor(EventSelector(types=["BOOKMARK"]), 1.0, random.Random(1))
    assert EventStream(named.edit).feed(b"".join(lines)) == [lines[0], lines[1], lines[3]]
    assert [r["type"] for r in named.records] == ["BOOKMARK"]
    # a progress BOOKMARK (no annotation) is an event like the others: every event means it too
    plain = _initial_events(end_annotated=False)
    assert EventStream(DropEditor(EventSelector(), 1.0, random.Random(1)).edit).feed(b"".join(plain)) == []
