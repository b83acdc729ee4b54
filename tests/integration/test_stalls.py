"""stallStream and stallConnection through a real `serve` in front of the stand-in, watched frame by frame with a
bare HTTP/2 client: a stalled watch gets no byte and no end for its window while its connection answers; a stalled
connection gets no byte at all, PINGs included, then heals, or ends at once when the client closes it."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.support.control import activate
from tests.support.processes import Started
from tests.support.raw_h2 import RawH2

PODS = {"verbs": ["watch"], "resources": ["pods"]}
WATCH = "/api/v1/pods?watch=1&n={n}&interval=0.1&timeoutSeconds=300"


def records(control: httpx.Client, event: str) -> list[dict[str, Any]]:
    since = control.headers["x-test-journal-cursor"]
    got: list[dict[str, Any]] = control.get("/v1/journal", params={"since": since}).json()["records"]
    return [r for r in got if r["event"] == event]


def until(what: Any, seconds: float = 5.0) -> Any:
    deadline = time.monotonic() + seconds
    while not (found := what()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


@pytest.fixture
def raw(proxy: Started) -> Any:
    opened: list[RawH2] = []

    def make() -> RawH2:
        c = RawH2(proxy.ready["proxyUrl"], proxy.ready["caFile"])
        opened.append(c)
        c.pump(0.3)  # the proxy's SETTINGS and its ack of ours: the connection's preface, before any request
        assert c.byte_times and c.closed_at is None
        c.byte_times.clear()
        return c
    yield make
    for c in opened:
        c.close()


def test_a_stalled_watch_sends_no_byte_and_no_end_for_its_window_then_ends_cleanly(
        raw: Any, control: httpx.Client) -> None:
    activate(control, "stall", [{"name": "s", "match": PODS, "fault": {"stallStream": {"afterEvents": 3,
                                                                                       "for": "2s"}}}])
    c = raw()
    sid = c.get(WATCH.format(n=40))
    c.pump(1.0)  # three events at 0.1 s apart, then the silence
    assert c.body(sid).count(b"\n") == 3 and c.ended_at(sid) is None
    silent_from = c.data_times(sid)[-1]
    c.ping(b"stall-01")
    health = c.get("/healthz")
    c.pump(0.5)
    assert len(c.ping_acks()) == 1 and c.ended_at(health) is not None, "the connection itself still answers"
    c.pump(3.0)
    ended = c.ended_at(sid)
    assert ended is not None and c.reset_at(sid) is None, "the stall ends in a clean END_STREAM, not a reset"
    assert c.body(sid).count(b"\n") == 3, "nothing the apiserver sent meanwhile reached the client"
    assert not [t for t in c.data_times(sid) if t > silent_from], "no byte of the watch during its window"
    assert 1.8 <= ended - silent_from <= 2.8, ended - silent_from
    [stalled] = [r for r in records(control, "watch-event") if r["action"] == "stalled"]
    assert stalled["afterEvents"] == 3 and stalled["forSeconds"] == 2
    [end] = records(control, "stall-end")
    assert (end["stall"], end["reason"], end["end"]) == ("stream", "window", "proxy")
    assert end["withheldBytes"] > 0 and 1.9 <= end["stalledSeconds"] <= 2.5


def test_a_stall_after_a_time_lowers_the_apiservers_timeout_to_its_window(raw: Any, control: httpx.Client) -> None:
    activate(control, "stall", [{"name": "s", "match": PODS, "fault": {"stallStream": {"after": "500ms",
                                                                                       "for": "1s"}}}])
    c = raw()
    t0 = time.monotonic()
    sid = c.get(WATCH.format(n=100))
    c.pump(3.0)
    ended = c.ended_at(sid)
    assert ended is not None and c.reset_at(sid) is None
    assert 1.4 <= ended - t0 <= 2.3, ended - t0
    assert all(t - t0 < 0.7 for t in c.data_times(sid)), "nothing after the silence began (0.5 s)"
    [end] = records(control, "stall-end")
    assert end["reason"] == "window"


def test_switching_the_profile_off_ends_a_stall_at_once(raw: Any, control: httpx.Client) -> None:
    activate(control, "stall", [{"name": "s", "match": PODS, "fault": {"stallStream": {"afterEvents": 1,
                                                                                       "for": "30s"}}}])
    c = raw()
    sid = c.get(WATCH.format(n=400))
    c.pump(0.6)
    assert c.ended_at(sid) is None
    off = time.monotonic()
    control.delete("/v1/active").raise_for_status()
    c.pump(1.5)
    ended = c.ended_at(sid)
    assert ended is not None and ended - off < 1.0 and c.reset_at(sid) is None
    assert c.body(sid).count(b"\n") == 1
    [end] = records(control, "stall-end")
    assert (end["reason"], end["end"]) == ("deactivated", "proxy")


def test_a_client_that_gives_up_on_a_stalled_watch_ends_the_stall(raw: Any, control: httpx.Client) -> None:
    activate(control, "stall", [{"name": "s", "match": PODS, "fault": {"stallStream": {"afterEvents": 0,
                                                                                       "for": "30s"}}}])
    c = raw()
    sid = c.get(WATCH.format(n=400))
    c.pump(0.5)
    assert c.body(sid) == b"" and c.ended_at(sid) is None
    c.reset(sid)
    ends = until(lambda: records(control, "stall-end"))
    assert [(e["reason"], e["end"]) for e in ends] == [("client-gone", "none")]


def test_a_stalled_connection_answers_nothing_not_even_a_ping_then_heals(
        raw: Any, control: httpx.Client, h2: httpx.Client) -> None:
    activate(control, "stall", [{"name": "s", "match": PODS, "fault": {"stallConnection": {"for": "2s"}}}])
    c = raw()
    t0 = time.monotonic()
    sid = c.get(WATCH.format(n=40))
    c.pump(0.3)  # the stall begins at the watch's request hook (bytes read with it in one read are answered)
    c.ping(b"stall-02")
    health = c.get("/healthz")
    c.pump(1.2)
    assert c.byte_times == [] and c.closed_at is None, "no byte, no FIN on the stalled connection"
    assert h2.get("/healthz").status_code == 200, "another connection is served meanwhile"
    c.pump(1.5)
    healed = c.byte_times[0][0] - t0
    assert 1.9 <= healed <= 2.6, healed
    assert len(c.ping_acks()) == 1 and c.ended_at(health) is not None
    assert c.body(sid).count(b"\n") >= 15, "what the apiserver sent meanwhile comes, in order, at the heal"
    [end] = records(control, "stall-end")
    assert (end["stall"], end["reason"]) == ("connection", "window")
    assert end["keptToClientBytes"] > 0 and end["keptFromClientBytes"] > 0


def test_a_client_that_closes_a_stalled_connection_ends_the_stall_at_once(raw: Any, control: httpx.Client) -> None:
    activate(control, "stall", [{"name": "s", "match": PODS, "fault": {"stallConnection": {"for": "60s"}}}])
    c = raw()
    c.get(WATCH.format(n=400))
    c.pump(0.5)
    assert c.byte_times == []
    c.close()
    [end] = until(lambda: records(control, "stall-end"), 3.0)
    assert (end["reason"], end["stall"]) == ("client-closed", "connection") and end["stalledSeconds"] < 1.5
