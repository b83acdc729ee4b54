"""The dashboard feed: samples with a fake clock, and the fan-out to subscribers (no sockets)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kube_fault_proxy.proxy.control.feed import Feed, Sampler, sse
from kube_fault_proxy.proxy.journal import Journal
from kube_fault_proxy.proxy.profiles.library import Entry, Library
from kube_fault_proxy.proxy.runtime import Runtime

from tests.support.builders import BIND_MATCH, bind, get_pod, profile


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make() -> tuple[Runtime, Clock]:
    clock = Clock()
    lib = Library({"fail": Entry(profile({"name": "r", "match": BIND_MATCH, "fault": {"abort": {"status": 500}}},
                                         name="fail", seed=7), "test")})
    return Runtime(lib, Journal(None, wall=lambda: 5.0), clock, lambda: 5.0), clock


def inject_bind(rt: Runtime, pod: str) -> None:
    ident = bind(pod)
    decision = rt.decide(ident)
    assert decision is not None
    rt.counters.performed(decision, ident, action="respond 500")
    rt.counters.bind_outcome(500)


def frame_data(frame: bytes) -> tuple[str, dict[str, Any]]:
    head, data = frame.decode().rstrip("\n").rsplit("\n", 1)
    return head.split("\n")[0].removeprefix("event: "), json.loads(data.removeprefix("data: "))


def test_sse_frame_format() -> None:
    assert sse("tick", 7, {"a": "x\ny"}) == b'event: tick\nid: 7\ndata: {"a":"x\\ny"}\n\n'


def test_one_sample_aggregates_everything_since_the_last_into_rates() -> None:
    rt, clock = make()
    sampler = Sampler(rt, wall=lambda: 1.0)
    first = sampler.sample()
    assert first["rates"] == dict.fromkeys(first["rates"], 0.0) and first["seq"] == 1
    rt.activations.activate("fail", ttl_seconds=60)
    for i in range(100):
        rt.decide(get_pod(f"g{i}"))
    for _ in range(10):
        rt.counters.bind_outcome(201)
    for _ in range(3):
        rt.counters.bind_outcome(429, "1")
    for i in range(5):
        inject_bind(rt, f"p{i}")
    clock.now += 0.5
    s = sampler.sample()
    assert s["totals"] == {"requests": 105, "bindsSucceeded": 10, "bindsThrottled": 3, "bindsFailed": 5,
                           "bindsInjected": 5, "injections": 5}
    assert s["rates"] == {"requests": 210.0, "bindsSucceeded": 20.0, "bindsThrottled": 6.0, "bindsFailed": 10.0,
                          "bindsInjected": 10.0, "injections": 10.0}
    assert s["active"]["profile"] == "fail" and s["active"]["remainingSeconds"] == pytest.approx(59.5)
    assert s["rules"]["r"] == {"matched": 5, "eligible": 5, "injected": 5, "triggerSeen": 0}
    assert [r["event"] for r in s["journal"]] == ["activate"] + ["inject"] * 5
    clock.now += 1.0
    idle = sampler.sample()
    assert idle["rates"]["requests"] == 0.0 and idle["journal"] == [] and idle["seq"] == 3


def test_journal_tail_is_capped_and_says_how_many_it_skipped() -> None:
    rt, _ = make()
    sampler = Sampler(rt, tail=20)
    for i in range(50):
        rt.counters.note("upstream-lost", reason=str(i))
    s = sampler.sample()
    assert [r["reason"] for r in s["journal"]] == [str(i) for i in range(30, 50)]
    assert s["journalSkipped"] == 30 and s["journalSeq"] == 50
    assert [r["seq"] for r in sampler.recent()] == list(range(31, 51))


def test_outage_state_and_injected_binds_count_from_before_the_sampler() -> None:
    rt, _ = make()
    rt.activations.activate("fail")
    inject_bind(rt, "early")
    rt.counters.note("outage-start", seconds=10, refuse="close", clientConnectionsClosed=3)
    sampler = Sampler(rt)
    s = sampler.sample()
    assert s["outage"] == {"active": True, "startedAt": 5.0, "seconds": 10, "refuse": "close",
                           "clientConnectionsClosed": 3}
    assert s["journal"] == []  # what came before the sampler is the snapshot's, not a tick's
    assert s["totals"]["bindsInjected"] == s["totals"]["bindsFailed"] == 1  # counted since the proxy started
    rt.counters.note("outage-end", clientConnectionsClosed=3, newConnectionsRefused=4, upstreamConnectsFailed=0,
            clientConnectionsLingering=0)
    ended = sampler.sample()["outage"]
    assert ended["active"] is False and ended["endedAt"] == 5.0 and ended["newConnectionsRefused"] == 4


def test_connection_counters_pass_through_from_the_runtimes_stats(monkeypatch: pytest.MonkeyPatch) -> None:
    rt, _ = make()
    rt.counters.connections.client_connected()
    assert Sampler(rt).sample()["connections"]["clientOpen"] == 1
    conns = {"clientAccepted": 9, "clientOpen": 4, "upstreamOpened": 5, "upstreamOpen": 2}
    plain = rt.stats
    monkeypatch.setattr(rt, "stats", lambda: {**plain(), "connections": conns})
    assert Sampler(rt).sample()["connections"] == conns


def test_library_fingerprint_changes_when_a_profile_is_replaced() -> None:
    rt, _ = make()
    sampler = Sampler(rt)
    before = sampler.sample()["library"]
    entry = rt.library.get("fail")
    assert entry is not None
    rt.library.put(entry.profile, "api")
    after = sampler.sample()["library"]
    assert [n for n, _ in before] == [n for n, _ in after] == ["fail"] and before != after


def test_subscribers_get_a_snapshot_then_the_same_tick_bytes() -> None:
    async def scenario() -> None:
        rt, _ = make()
        rt.activations.activate("fail")
        feed = Feed(rt, interval=3600)  # ticks by hand below
        a, b = feed.subscribe(), feed.subscribe()
        event, snap = frame_data(await a.next())
        assert event == "snapshot" and snap["interval"] == 3600
        assert [r["event"] for r in snap["journal"]] == ["activate"]
        await b.next()
        inject_bind(rt, "p1")
        feed.tick()
        fa, fb = await a.next(), await b.next()
        assert fa is fb  # encoded once for every subscriber
        assert frame_data(fa or b"")[1]["totals"]["bindsInjected"] == 1
        feed.unsubscribe(a)
        feed.unsubscribe(b)
        assert feed.subscribers == 0

    asyncio.run(scenario())


def test_sampling_runs_only_while_someone_listens_at_the_interval() -> None:
    async def scenario() -> None:
        rt, _ = make()
        feed = Feed(rt, interval=0.05)
        sub = feed.subscribe()
        await sub.next()
        loop = asyncio.get_running_loop()
        started, ticks = loop.time(), 0
        while loop.time() - started < 0.5:
            for i in range(50):  # busy proxy: many requests per tick, still one frame per tick
                rt.decide(get_pod(f"g{i}"))
            await asyncio.sleep(0.005)
            while not sub.queue.empty():
                frame = sub.queue.get_nowait()
                assert frame is not None
                ticks += 1
        assert 5 <= ticks <= 11, ticks  # 10 expected at 0.05 s; timers on a busy machine run late
        assert rt.counters.requests > 20 * ticks
        feed.unsubscribe(sub)
        assert feed._task is None
        seq = rt.counters.requests
        await asyncio.sleep(0.15)
        assert rt.counters.requests == seq and feed.subscribers == 0

    asyncio.run(scenario())


def test_a_client_that_lags_is_dropped_and_the_rest_go_on() -> None:
    async def scenario() -> None:
        rt, _ = make()
        feed = Feed(rt, interval=3600, backlog=2)
        stuck, reader = feed.subscribe(), feed.subscribe()
        for _ in range(4):
            feed.tick()
            while not reader.queue.empty():
                assert reader.queue.get_nowait() is not None
        assert stuck.closed and feed.subscribers == 1
        assert await stuck.next() is None  # its stream ends; the page reconnects to a fresh snapshot
        feed.close()
        assert reader.closed and await reader.next() is None and feed.subscribers == 0
        assert feed.subscribe().closed  # a closed feed ends new streams at once

    asyncio.run(scenario())
