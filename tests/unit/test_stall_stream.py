"""stallStream (proxy.faults.stall_stream): its settings and its plan; and the stall's state it runs on the stream
(proxy.stalled_streams): the event counter, what passes and what is withheld."""

from __future__ import annotations

import random
import struct

import pytest
from kube_fault_proxy.proxy.faults import Fault
from kube_fault_proxy.proxy.faults.plan import LimitWatch, StallAnswer
from kube_fault_proxy.proxy.faults.stall_stream import StallStream
from kube_fault_proxy.proxy.stalled_streams import PROTOBUF, StreamStall, WatchFrames
from pydantic import ValidationError

from tests.support.builders import bind
from tests.support.watch_streams import EVENTS, STREAM

RNG = random.Random(0)


def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


@pytest.mark.parametrize(("settings", "error"), [
    ({"for": "30s"}, "exactly one of afterEvents, after"),
    ({"afterEvents": 1, "after": "1s", "for": "30s"}, "exactly one of afterEvents, after"),
    ({"afterEvents": 1}, "Field required"),
    ({"afterEvents": 1, "for": "0s"}, "longer than 0s"),
    ({"afterEvents": 1, "for": "61m"}, "at most 3600s"),
    ({"after": "2h", "for": "1s"}, "after must be at most 3600s"),
    ({"afterEvents": -1, "for": "1s"}, "greater than or equal to 0"),
    ({"afterEvents": 1, "for": 30}, "a duration needs a unit"),
    ({"afterEvents": 1, "for": "30s", "then": "reset"}, "Extra inputs are not permitted"),
])
def test_bad_settings_are_refused(settings: dict[str, object], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        Fault.model_validate({"stallStream": settings})


def test_the_plan_after_events_is_the_stall_alone() -> None:
    spec = StallStream.model_validate({"afterEvents": 2, "for": "1m"})
    plan = spec.plan(bind("p"), RNG)
    assert plan.before == (StallAnswer(60.0, 2, None),) and plan.forwards
    assert plan.describe() == "stall the stream after 2 events for 60s, then end it, then forward"


def test_the_plan_after_a_time_asks_the_apiserver_to_end_its_watch_as_the_window_closes() -> None:
    spec = StallStream.model_validate({"after": "1.5s", "for": "2s"})
    assert spec.plan(bind("p"), RNG).before == (StallAnswer(2.0, None, 1.5), LimitWatch(4))


def test_it_acts_on_watches_only() -> None:
    spec = StallStream.model_validate({"afterEvents": 0, "for": "1s"})
    assert not spec.applies_to(bind("p"))


@pytest.mark.parametrize("cuts", [[len(STREAM)], [1, 7, 50, len(STREAM)], list(range(1, len(STREAM) + 1))])
def test_json_events_are_counted_however_chunks_cut_them(cuts: list[int]) -> None:
    frames, seen, pos = WatchFrames(protobuf=False), [], 0
    for end in cuts:
        at = frames.until(STREAM[pos:end], 3)
        if at is not None:
            seen.append(pos + at)
            break
        pos = end
    assert seen == [len(b"".join(EVENTS[:3]))] and frames.count == 3


@pytest.mark.parametrize("step", [1, 3, 5, 1000])
def test_protobuf_frames_are_counted_by_their_length_however_chunks_cut_them(step: int) -> None:
    stream = frame(b"k8s\x00one") + frame(b"") + frame(b"k8s\x00three-three") + frame(b"four")
    frames, pos, found = WatchFrames(protobuf=True), 0, None
    while pos < len(stream) and found is None:
        at = frames.until(stream[pos:pos + step], 3)
        found = None if at is None else pos + at
        pos += step
    assert found == len(frame(b"k8s\x00one") + frame(b"") + frame(b"k8s\x00three-three")) and frames.count == 3


def test_a_stall_after_events_passes_them_then_withholds_the_rest_of_the_chunk_and_all_after() -> None:
    stall = StreamStall(StallAnswer(5.0, 2, None), "application/json", began=100.0)
    assert stall.feed(EVENTS[0], 100.1) == [EVENTS[0]] and stall.stalled_at is None
    assert stall.feed(EVENTS[1] + EVENTS[2], 100.2) == [EVENTS[1]]
    assert stall.stalled_at == 100.2 and stall.ends_at == 105.2
    assert stall.feed(EVENTS[3], 101.0) == [] and stall.withheld_bytes == len(EVENTS[2]) + len(EVENTS[3])


def test_a_stall_after_no_event_withholds_from_the_first_byte() -> None:
    stall = StreamStall(StallAnswer(5.0, 0, None), f"{PROTOBUF};stream=watch", began=0.0)
    assert stall.stalled_at == 0.0, "silent from the answer's headers, before any byte"
    assert stall.feed(frame(b"x"), 0.1) == [] and stall.withheld_bytes == 5
    assert StreamStall(StallAnswer(5.0, None, 0.0), "application/json", began=2.0).stalled_at == 2.0


def test_a_stall_after_a_time_begins_at_its_time_on_the_next_chunk_or_on_its_timer() -> None:
    stall = StreamStall(StallAnswer(5.0, None, 1.0), "application/json", began=10.0)
    assert stall.due == 11.0
    assert stall.feed(EVENTS[0], 10.5) == [EVENTS[0]]
    assert stall.feed(EVENTS[1], 11.2) == [] and stall.stalled_at == 11.0  # it began at its time, not at the chunk
    timed = StreamStall(StallAnswer(5.0, None, 1.0), "application/json", began=10.0)
    assert timed.start(11.0) and not timed.start(12.0) and timed.ends_at == 16.0


def test_once_over_a_stall_that_began_withholds_and_one_that_had_not_passes() -> None:
    began = StreamStall(StallAnswer(5.0, 0, None), "application/json", began=0.0)
    began.feed(EVENTS[0], 0.1)
    began.ended = True
    assert began.feed(EVENTS[1], 0.2) == []
    never = StreamStall(StallAnswer(5.0, 9, None), "application/json", began=0.0)
    never.ended = True
    assert never.feed(EVENTS[0], 0.1) == [EVENTS[0]] and never.stalled_at is None


def test_a_searched_rule_is_valid() -> None:
    from kube_fault_proxy.proxy.faults.base import Draw

    rng = random.Random(3)
    for _ in range(20):
        StallStream.model_validate(StallStream.draw(rng, Draw()))
