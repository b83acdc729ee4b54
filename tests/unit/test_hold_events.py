"""holdEvents: a watch held until an event passes on another resource's watch, or a time limit."""

from __future__ import annotations

import json

import pytest
from kube_fault_proxy.proxy.counters import Counters
from kube_fault_proxy.proxy.faults import Fault
from kube_fault_proxy.proxy.faults.hold_events import HoldEditor, HoldEvents, UntilEvent
from kube_fault_proxy.proxy.requests.identity import parse_untrusted
from kube_fault_proxy.proxy.requests.watch import EventSelector, EventStream
from kube_fault_proxy.proxy.stale_views import Answer, StaleViews
from kube_fault_proxy.proxy.watch_signals import WatchSignals
from pydantic import ValidationError

PODS, NODES = ("", "pods"), ("", "nodes")


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def line(kind: str, obj: str, name: str, rv: int, node: str = "") -> bytes:
    spec = {"nodeName": node} if node else {}
    return json.dumps({"type": kind, "object": {"kind": obj, "metadata": {"name": name, "resourceVersion": str(rv)},
                                                "spec": spec}}, separators=(",", ":")).encode() + b"\n"


def names(lines: list[bytes]) -> list[str]:
    return [json.loads(x)["object"]["metadata"]["name"] for x in lines]


def held_nodes(clock: Clock, signals: WatchSignals) -> tuple[HoldEditor, EventStream, list[int]]:
    until = UntilEvent(resource="pods", events=EventSelector(types=["MODIFIED"], hasNodeName=True))
    editor = HoldEditor(10.0, until, clock)
    ticks: list[int] = []
    editor.request_tick = lambda: ticks.append(1)
    editor.listen(signals)
    return editor, EventStream(editor.edit), ticks


def test_node_events_wait_until_a_pod_is_bound_on_the_pod_watch() -> None:
    clock, signals = Clock(), WatchSignals()
    editor, nodes, ticks = held_nodes(clock, signals)
    assert nodes.feed(line("MODIFIED", "Node", "n1", 10) + line("MODIFIED", "Node", "n2", 11)) == []
    sv = StaleViews(Counters.__new__(Counters), clock)
    sv.signals = signals
    pods = sv.watch(parse_untrusted("GET", "/api/v1/pods", "watch=1", "", None, "", ""),
                    Answer(200, "application/json;stream=watch", "", None), True)
    assert pods is not None
    unbound = line("ADDED", "Pod", "p", 12)
    assert pods(unbound) == [unbound] and not ticks, "the pod watch passes unchanged; not the event waited for"
    clock.now += 1.5
    bound = line("MODIFIED", "Pod", "p", 13, node="n1")
    assert pods(bound[:20]) == [bound[:20]] and pods(bound[20:]) == [bound[20:]]
    assert ticks == [1] and editor.next_due() == clock.now
    assert names(editor.tick()) == ["n1", "n2"]
    assert editor.records == [{"action": "held", "reason": "event", "events": 2, "heldSeconds": 1.5,
                               "releasedBy": {"type": "MODIFIED", "kind": "Pod", "namespace": "",
                                              "name": "p", "resourceVersion": "13"}}]
    assert not signals.watching(PODS), "released: nobody waits"
    assert nodes.feed(line("MODIFIED", "Node", "n3", 14)) == [] and signals.watching(PODS), "the next hold"


def test_a_hold_ends_at_max_seconds_and_at_the_watchs_end() -> None:
    clock, signals = Clock(), WatchSignals()
    editor, nodes, _ = held_nodes(clock, signals)
    nodes.feed(line("ADDED", "Node", "n1", 1))
    assert editor.next_due() == 60.0
    clock.now = 60.0
    assert names(editor.tick()) == ["n1"] and editor.records[-1]["reason"] == "time"
    nodes.feed(line("ADDED", "Node", "n2", 2))
    assert names(editor.at_end()) == ["n2"] and editor.records[-1]["reason"] == "end"
    assert not signals.watching(PODS)


def test_a_watch_never_releases_itself() -> None:
    signals, released = WatchSignals(), []
    owner = object()
    signals.wait(PODS, lambda e: True, released.append, owner)
    from kube_fault_proxy.proxy.requests.watch import parse_event
    event = parse_event(line("ADDED", "Pod", "p", 1))
    assert event is not None
    signals.offer(PODS, event, owner)
    assert not released
    signals.offer(PODS, event, None)
    assert released == [event]


def test_schema() -> None:
    fault = Fault.model_validate({"holdEvents": {"maxSeconds": 5, "untilEvent": {"resource": "pods"}}})
    assert isinstance(fault.spec, HoldEvents)
    with pytest.raises(ValidationError, match="maxSeconds"):
        Fault.model_validate({"holdEvents": {"untilEvent": {"resource": "pods"}}})
    with pytest.raises(ValidationError, match="Extra inputs"):
        Fault.model_validate({"holdEvents": {"maxSeconds": 5, "untilEvent": {"resource": "pods", "kind": "Pod"}}})
    assert all(f.description for f in HoldEvents.model_fields.values())
    assert all(f.description for f in UntilEvent.model_fields.values())


def test_a_hold_releases_what_it_holds_when_its_activation_is_over() -> None:
    clock, signals = Clock(), WatchSignals()
    editor, nodes, _ = held_nodes(clock, signals)
    nodes.feed(line("ADDED", "Node", "n1", 1) + line("ADDED", "Node", "n2", 2))
    assert names(editor.release()) == ["n1", "n2"] and editor.records[-1]["reason"] == "deactivated"
    assert not signals.watching(PODS) and editor.release() == []
