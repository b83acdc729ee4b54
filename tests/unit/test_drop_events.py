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
