"""Client connection timeouts (proxy.mitm.timeouts): which connections expire, and why."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest
from kube_fault_proxy.proxy.mitm.patches import internals
from kube_fault_proxy.proxy.mitm.timeouts import ConnectionTimeouts
from mitmproxy.addons import proxyserver
from mitmproxy.connection import ConnectionState
from mitmproxy.test import taddons

from tests.support.mitm import events, live_handler, runtime


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now




@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def t(clock: Clock) -> ConnectionTimeouts:
    return ConnectionTimeouts(runtime=None, read_header_seconds=32, idle_seconds=90, clock=clock)  # type: ignore[arg-type]


def test_a_connection_that_never_finishes_a_request_goes_at_the_read_header_timeout(
        t: ConnectionTimeouts, clock: Clock) -> None:
    t.client_connected(SimpleNamespace(id="slow"))  # type: ignore[arg-type]
    clock.now += 31.9
    assert t.expired(clock.now) == []
    clock.now += 0.1
    assert t.expired(clock.now) == [("slow", "no complete request within 32s (read-header timeout)")]


def test_an_open_request_is_never_timed_out_however_long_it_lasts(t: ConnectionTimeouts, clock: Clock) -> None:
    t.client_connected(SimpleNamespace(id="watcher"))  # type: ignore[arg-type]
    t.request_started("watcher")
    clock.now += 3600
    assert t.expired(clock.now) == []
    t.request_ended("watcher")  # the watch ends: idle from now
    clock.now += 89
    assert t.expired(clock.now) == []
    clock.now += 1
    assert t.expired(clock.now) == [("watcher", "idle for 90s (idle timeout)")]


def test_a_connection_is_idle_only_once_all_its_requests_ended(t: ConnectionTimeouts, clock: Clock) -> None:
    t.client_connected(SimpleNamespace(id="c"))  # type: ignore[arg-type]
    t.request_started("c")
    t.request_started("c")
    t.request_ended("c")
    clock.now += 1000
    assert t.expired(clock.now) == []  # one is still open
    t.request_ended("c")
    clock.now += 90
    assert [cid for cid, _ in t.expired(clock.now)] == ["c"]


@pytest.mark.parametrize(("read_header", "idle", "expect"), [(0, 90, ["used"]), (32, 0, ["new"]), (0, 0, [])])
def test_a_zero_timeout_is_off(clock: Clock, read_header: float, idle: float, expect: list[str]) -> None:
    t = ConnectionTimeouts(None, read_header, idle, clock)  # type: ignore[arg-type]
    t.client_connected(SimpleNamespace(id="new"))  # type: ignore[arg-type]
    t.client_connected(SimpleNamespace(id="used"))  # type: ignore[arg-type]
    t.request_started("used")
    t.request_ended("used")
    clock.now += 10_000
    assert [cid for cid, _ in t.expired(clock.now)] == expect


def test_a_departed_client_is_forgotten(t: ConnectionTimeouts, clock: Clock) -> None:
    client = SimpleNamespace(id="gone")
    t.client_connected(client)  # type: ignore[arg-type]
    t.client_disconnected(client)  # type: ignore[arg-type]
    clock.now += 10_000
    assert t.expired(clock.now) == [] and t.conns == {}


def test_a_request_reported_by_id_counts_once_however_often_it_is_reported(t: ConnectionTimeouts,
                                                                          clock: Clock) -> None:
    t.client_connected(SimpleNamespace(id="c"))  # type: ignore[arg-type]
    t.request_started("c", "r1")
    t.request_started("c", "r1")  # the same request again
    t.request_ended("c", "r2")  # never started
    assert (t.conns["c"].open, t.conns["c"].requests) == (1, 1)
    t.request_ended("c", "r1")
    t.request_ended("c", "r1")
    assert t.conns["c"].open == 0
    clock.now += 90
    assert [cid for cid, _ in t.expired(clock.now)] == ["c"]


def test_the_sweep_closes_an_expired_connection_and_journals_why(tmp_path: Path, clock: Clock) -> None:
    rt = runtime(tmp_path)

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            handler = live_handler(internals.proxyserver(), upstreams=0)
            t = ConnectionTimeouts(rt, read_header_seconds=0.4, idle_seconds=90, clock=clock)
            t.client_connected(handler.client)
            t.running()
            clock.now += 1
            for _ in range(100):
                await asyncio.sleep(0.02)
                if events(rt, "client-timeout"):
                    break
            t.done()
            assert handler.client.state is ConnectionState.CLOSED
            [timeout] = events(rt, "client-timeout")
            assert timeout["reason"] == "no complete request within 0.4s (read-header timeout)"
            assert timeout["client"] == "10.0.0.7:40001" and t.conns == {}

    asyncio.run(main())
