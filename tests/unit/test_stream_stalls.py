"""The stalled watches' addon (proxy.mitm.stream_stalls): it reads a StallAnswer from the decision the fault addon
stamped, silences the watch, ends it when the window closes (through the stream ticks, replaced here), holds an
apiserver's end meanwhile, and ends a stall when the client goes or the activation ends. No socket."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from kube_fault_proxy.proxy.engine import Decision
from kube_fault_proxy.proxy.faults.plan import Plan, StallAnswer
from kube_fault_proxy.proxy.mitm import flow_keys, stream_stalls
from kube_fault_proxy.proxy.mitm.patches import stream_ticks
from kube_fault_proxy.proxy.requests.identity import parse
from kube_fault_proxy.proxy.requests.watch import TICK
from mitmproxy import http

from tests.support.mitm import answer, flow
from tests.support.watch_streams import EVENTS

DECISION = Decision(profile="p", epoch=3, seed=7, rule="r", fault="stallStream",
                    plan=Plan(before=(StallAnswer(30.0, 1, None),)), match=1, injection=1)


class Activations:
    def __init__(self) -> None:
        self.on_end: list[Callable[[int], None]] = []


def watch(decision: Decision | None = DECISION, encoding: bytes | None = b"gzip") -> http.HTTPFlow:
    f = flow("GET", "/api/v1/pods?watch=1", headers=[(b"accept-encoding", encoding)] if encoding else [])
    f.metadata[flow_keys.IDENT] = parse("GET", "/api/v1/pods", "watch=1")
    if decision is not None:
        f.metadata[flow_keys.DECISION] = decision
    return f


def addon(monkeypatch: pytest.MonkeyPatch, clock: list[float]) -> tuple[stream_stalls.StreamStalls, Activations,
                                                                           list[tuple[str, dict[str, Any]]],
                                                                           list[object]]:
    ended: list[object] = []
    monkeypatch.setattr(stream_ticks, "end", lambda client_id, f: ended.append(f) or True)
    notes: list[tuple[str, dict[str, Any]]] = []
    activations = Activations()
    stalls = stream_stalls.StreamStalls(lambda event, **fields: notes.append((event, fields)),
                                        activations, lambda: clock[0])  # type: ignore[arg-type]
    return stalls, activations, notes, ended


def streaming(stalls: stream_stalls.StreamStalls, f: http.HTTPFlow) -> Any:
    stalls.request(f)
    f.response = answer(200, b"", [(b"content-type", b"application/json;stream=watch")])
    f.response.stream = True  # the fault addon turned streaming on
    stalls.responseheaders(f)
    return f.response.stream


def test_a_stall_counting_events_asks_for_them_uncompressed_journaled(monkeypatch: pytest.MonkeyPatch) -> None:
    stalls, _, notes, _ = addon(monkeypatch, [0.0])
    f = watch()
    stalls.request(f)
    assert "accept-encoding" not in f.request.headers
    assert notes == [("watch-uncompressed", {**DECISION.stamp(), "request": f.metadata[flow_keys.IDENT].as_dict(),
                                             "acceptEncoding": "gzip"})]


def test_the_watch_passes_its_events_then_goes_silent_and_the_window_ends_it(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        clock = [100.0]
        stalls, _, notes, ended = addon(monkeypatch, clock)
        f = watch(replace(DECISION, plan=Plan(before=(StallAnswer(0.05, 1, None),))), encoding=None)
        stream = streaming(stalls, f)
        assert isinstance(stream, stream_stalls.StalledStream)
        assert stream(EVENTS[0] + EVENTS[1]) == [EVENTS[0]]
        assert stream(TICK) == [] and stream(EVENTS[2]) == []
        assert [(e, n.get("action")) for e, n in notes] == [("watch-event", "stalled")]
        clock[0] = 100.05
        await asyncio.sleep(0.1)
        assert ended == [f], "the proxy ended the stream when the window closed"
        [(event, end)] = notes[1:]
        assert event == "stall-end" and (end["reason"], end["end"], end["stall"]) == ("window", "proxy", "stream")
        assert end["withheldBytes"] == len(EVENTS[1]) + len(EVENTS[2]) and end["stalledSeconds"] == 0.05
        assert stream(b"") == [] and stalls.response(f) is None, "the proxy's own end passes at once"
    asyncio.run(main())


def test_an_apiserver_end_in_the_window_is_held_until_it_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        stalls, _, notes, ended = addon(monkeypatch, [0.0])
        f = watch(replace(DECISION, plan=Plan(before=(StallAnswer(0.2, 0, None),))))
        stream = streaming(stalls, f)
        assert stream(EVENTS[0]) == [] and stream(b"") == []
        held = stalls.response(f)
        assert held is not None
        waiting = asyncio.ensure_future(held)
        await asyncio.sleep(0.05)
        assert not waiting.done(), "the end waits for the window"
        await asyncio.wait_for(waiting, 1.0)
        assert ended == [], "the apiserver's end is the one that goes: nothing injected"
        assert [(e, n.get("reason"), n.get("end")) for e, n in notes][-1] == ("stall-end", "window", "apiserver")
    asyncio.run(main())


def test_a_client_that_resets_the_stream_ends_the_stall(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        stalls, _, notes, ended = addon(monkeypatch, [0.0])
        f = watch()
        stream = streaming(stalls, f)
        stream(EVENTS[0] + EVENTS[1])
        stalls.error(f)
        assert ended == [] and stalls.live == {}
        assert [(e, n.get("reason")) for e, n in notes][-1] == ("stall-end", "client-gone")
    asyncio.run(main())


def test_the_activations_end_ends_its_stalls_and_a_stall_not_begun_lets_the_watch_pass(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        stalls, activations, notes, ended = addon(monkeypatch, [0.0])
        begun, waiting = watch(), watch(replace(DECISION, plan=Plan(before=(StallAnswer(30.0, 99, None),))))
        s1, s2 = streaming(stalls, begun), streaming(stalls, waiting)
        s1(EVENTS[0] + EVENTS[1])
        activations.on_end[0](DECISION.epoch)
        assert ended == [begun], "a silent watch ends; one whose silence had not begun is not ended"
        assert s2(EVENTS[2]) == [EVENTS[2]], "and passes on as the apiserver sends it"
        assert sorted(n["reason"] for e, n in notes if e == "stall-end") == ["deactivated", "deactivated"]
    asyncio.run(main())


def test_a_watch_nothing_stalls_keeps_its_plain_streaming(monkeypatch: pytest.MonkeyPatch) -> None:
    stalls, _, notes, _ = addon(monkeypatch, [0.0])
    for f in (watch(None), watch(replace(DECISION, plan=Plan()))):
        assert streaming(stalls, f) is True and f.request.headers["accept-encoding"] == "gzip"
        assert stalls.response(f) is None
    assert notes == [] and stalls.live == {}
