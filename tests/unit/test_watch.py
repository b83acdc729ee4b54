"""Watch event reassembly, event parsing and selectors (proxy.requests.watch), without sockets. The event
editors are tested with their kinds: test_cut.py, test_drop_events.py, test_duplicate_events.py."""

from __future__ import annotations

import pytest
from kube_fault_proxy.proxy.requests.watch import EventSelector, EventStream, parse_event

from tests.support.watch_streams import EVENTS, STREAM


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


