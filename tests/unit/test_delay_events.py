"""delayEvents: every selected event late and in order, the rest behind it, a cap, the end."""

from __future__ import annotations

import json
import random

import pytest
from kube_fault_proxy.proxy.faults import Fault
from kube_fault_proxy.proxy.faults.delay_events import DelayEditor, DelayEvents
from kube_fault_proxy.proxy.requests.watch import EventSelector, EventStream
from pydantic import ValidationError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def line(kind: str, name: str, rv: int) -> bytes:
    return json.dumps({"type": kind, "object": {"kind": "Pod", "metadata": {
        "name": name, "namespace": "ns", "resourceVersion": str(rv)}}}, separators=(",", ":")).encode() + b"\n"


def names(lines: list[bytes]) -> list[str]:
    return [json.loads(x)["object"]["metadata"].get("name", "BOOKMARK") for x in lines]


def editor(clock: Clock, selector: EventSelector | None = None, jitter: float = 0.0,
           max_held: int = 100) -> tuple[DelayEditor, EventStream]:
    e = DelayEditor(selector or EventSelector(), 2.0, jitter, max_held, random.Random(1), clock)
    return e, EventStream(e.edit)


def test_every_event_is_delivered_that_much_later_in_order() -> None:
    clock = Clock()
    e, s = editor(clock)
    assert s.feed(line("ADDED", "a", 1)) == [] and e.next_due() == 102.0
    clock.now = 101.0
    assert s.feed(line("MODIFIED", "a", 2) + line("ADDED", "b", 3)) == []
    clock.now = 102.0
    assert names(e.tick()) == ["a"] and e.next_due() == 103.0
    clock.now = 103.5
    assert names(e.tick()) == ["a", "b"] and e.next_due() is None
    [first, second] = e.records
    assert (first["events"], first["minLateSeconds"], second["events"], second["maxLateSeconds"]) == (1, 2.0, 2, 2.5)


def test_unselected_events_and_bookmarks_pass_at_once_or_wait_behind_a_delayed_one() -> None:
    clock = Clock()
    e, s = editor(clock, EventSelector(names=["slow"]))
    bookmark = b'{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"5"}}}\n'
    assert names(s.feed(line("ADDED", "quick", 1))) == ["quick"], "nothing held: passes at once"
    assert s.feed(line("ADDED", "slow", 2) + line("ADDED", "quick2", 3) + bookmark) == []
    clock.now = 102.0
    assert names(s.feed(line("ADDED", "quick3", 6))) == ["slow", "quick2", "BOOKMARK", "quick3"]
    assert e.records[-1] == {"action": "delayed", "reason": "due", "events": 1, "passedBehind": 2,
                             "maxLateSeconds": 2.0, "minLateSeconds": 2.0}


def test_jitter_never_reorders() -> None:
    clock = Clock()
    e, s = editor(clock, jitter=5.0)
    for i in range(20):
        s.feed(line("MODIFIED", f"p{i}", i))
        clock.now += 0.01
    clock.now += 10
    assert names(e.tick()) == [f"p{i}" for i in range(20)]


def test_the_cap_releases_the_oldest_early_and_is_journaled() -> None:
    clock = Clock()
    e, s = editor(clock, max_held=2)
    out = s.feed(line("ADDED", "a", 1) + line("ADDED", "b", 2) + line("ADDED", "c", 3))
    assert names(out) == ["a"] and len(e.held) == 2
    assert e.records[0] == {"action": "delay-cap", "held": 3, "released": 1}
    assert e.records[1]["reason"] == "cap"


def test_what_is_held_is_delivered_when_the_apiserver_ends_the_watch() -> None:
    clock = Clock()
    e, s = editor(clock)
    s.feed(line("ADDED", "a", 1) + b'{"type":"ERROR","object":{"kind":"Status","code":410}}\n')
    assert e.tick() == []
    end = s.end() + e.at_end()
    assert names(end[:1]) == ["a"] and b'"ERROR"' in end[1]
    assert e.records[-1]["reason"] == "end"


def test_schema_and_plan() -> None:
    fault = Fault.model_validate({"delayEvents": {"seconds": 1.5, "jitterSeconds": 0.5, "events": {"types": ["ADDED"]}}})
    assert isinstance(fault.spec, DelayEvents)
    with pytest.raises(ValidationError, match="seconds"):
        Fault.model_validate({"delayEvents": {"seconds": 0}})
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Fault.model_validate({"delayEvents": {"seconds": 1, "lag": 2}})
    assert all(f.description for f in DelayEvents.model_fields.values())


def test_what_is_delayed_is_delivered_at_once_when_its_activation_is_over() -> None:
    clock = Clock()
    e, s = editor(clock)
    s.feed(line("ADDED", "a", 1) + line("ADDED", "b", 2))
    assert e.tick() == [] and names(e.release()) == ["a", "b"]
    assert e.records[-1]["reason"] == "deactivated" and e.release() == []
