"""duplicateEvents (proxy.faults.duplicate_events): chosen events delivered twice."""

from __future__ import annotations

import random

from kube_fault_proxy.proxy.faults.duplicate_events import DuplicateEditor
from kube_fault_proxy.proxy.requests.watch import EventSelector

from tests.support.watch_streams import EVENTS, run_editor

RNG = random.Random(0)


def test_duplicate() -> None:
    editor = DuplicateEditor(EventSelector(names=["b"]), 1.0, random.Random(1))
    assert run_editor(editor) == [EVENTS[0], EVENTS[1], EVENTS[2], EVENTS[2], EVENTS[3]]
