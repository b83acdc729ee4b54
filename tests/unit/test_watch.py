"""Watch event reassembly and the event editors (cut, drop, duplicate), without sockets."""

from __future__ import annotations

import json
import random

import pytest
from kube_fault_proxy.proxy.faults.cut import CutEditor
from kube_fault_proxy.proxy.faults.drop_events import DropEditor
from kube_fault_proxy.proxy.faults.duplicate_events import DuplicateEditor
from kube_fault_proxy.proxy.requests.watch import EventSelector, EventStream, parse_event


def ev(kind: str, name: str, rv: int, node: str | None = None) -> bytes:
    obj = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)},
           "spec": {"nodeName": node} if node else {}}
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


EVENTS = [ev("ADDED", "a", 1), ev("MODIFIED", "a", 2, "n1"), ev("ADDED", "b", 3), ev("DELETED", "a", 4, "n1")]
STREAM = b"".join(EVENTS)


def passthrough(line: bytes, event: object) -> list[bytes]:
    return [line]


@pytest.mark.parametrize("size", [1, 2, 7, 50, 117, len(STREAM)])
def test_events_split_across_chunks_are_reassembled(size: int) -> None:
    seen: list[bytes] = []
    stream = EventStream(lambda line, e: seen.append(line) or [line])
    out: list[bytes] = []
    for i in range(0, len(STREAM), size):
        out += stream.feed(STREAM[i : i + size])
    out += stream.end()
    assert seen == EVENTS
    assert b"".join(out) == STREAM


def test_several_events_in_one_chunk() -> None:
    stream = EventStream(passthrough)
    assert stream.feed(STREAM) == EVENTS


def test_a_final_partial_line_passes_through_unchanged() -> None:
    stream = EventStream(passthrough)
    assert stream.feed(EVENTS[0] + b'{"type":"ADD') == [EVENTS[0]]
    assert stream.end() == [b'{"type":"ADD']
    assert stream.end() == []


def test_an_empty_chunk_emits_nothing() -> None:
    assert EventStream(passthrough).feed(b"") == []


def test_parse_event() -> None:
    e = parse_event(EVENTS[1])
    assert e is not None and (e.type, e.kind, e.namespace, e.name, e.resource_version, e.has_node_name) == (
        "MODIFIED", "Pod", "ns", "a", "2", True)
    assert parse_event(b"not json\n") is None
    assert parse_event(b'{"type":"ADDED"}\n') is None


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({}, [True, True, True, True]),
        ({"types": ["MODIFIED", "DELETED"]}, [False, True, False, True]),
        ({"names": ["b*"]}, [False, False, True, False]),
        ({"hasNodeName": True}, [False, True, False, True]),
        ({"hasNodeName": False, "types": ["ADDED"]}, [True, False, True, False]),
        ({"namespaces": ["other"]}, [False, False, False, False]),
    ],
)
def test_event_selector(selector: dict[str, object], expected: list[bool]) -> None:
    check = EventSelector.model_validate(selector).compile()
    assert [check(parse_event(line)) for line in EVENTS] == expected  # type: ignore[arg-type]


def run(editor: object) -> list[bytes]:
    stream = EventStream(editor.edit)  # type: ignore[attr-defined]
    return stream.feed(STREAM) + stream.end() + editor.at_end()  # type: ignore[attr-defined]


def test_drop_selected_events_and_record_them() -> None:
    editor = DropEditor(EventSelector(types=["MODIFIED"]), 1.0, random.Random(1))
    assert run(editor) == [EVENTS[0], EVENTS[2], EVENTS[3]]
    assert editor.records == [{"action": "dropped", "type": "MODIFIED", "kind": "Pod", "namespace": "ns",
                               "name": "a", "resourceVersion": "2"}]


def test_drop_with_a_probability_is_seeded() -> None:
    lines = [ev("MODIFIED", f"p{i}", i) for i in range(200)]

    def kept(seed: int) -> list[bytes]:
        return EventStream(DropEditor(EventSelector(), 0.5, random.Random(seed)).edit).feed(b"".join(lines))

    assert kept(3) == kept(3) != kept(4)
    assert 60 < len(kept(3)) < 140


def test_duplicate() -> None:
    editor = DuplicateEditor(EventSelector(names=["b"]), 1.0, random.Random(1))
    assert run(editor) == [EVENTS[0], EVENTS[1], EVENTS[2], EVENTS[2], EVENTS[3]]


def test_cut_after_events_with_an_error_drops_the_rest() -> None:
    editor = CutEditor(2, "expired")
    out = run(editor)
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
    out = run(editor)
    assert out[:4] == EVENTS and b'"reason":"Expired"' in out[4]
