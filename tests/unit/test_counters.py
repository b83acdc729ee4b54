"""The proxy's counters (proxy.counters): what each request, injection and Binding adds, and what a reset zeroes."""

from __future__ import annotations

from pathlib import Path

import pytest
from kube_fault_proxy.proxy.counters import Counters
from kube_fault_proxy.proxy.engine import Engine
from kube_fault_proxy.proxy.journal import Journal

from tests.support.builders import BIND_MATCH, bind, get_pod, profile


@pytest.fixture
def counters(tmp_path: Path) -> Counters:
    return Counters(Journal(tmp_path / "j.jsonl", wall=lambda: 5.0))


# (status, Retry-After, succeeded, throttled, failed)
OUTCOMES = [
    (200, None, 1, 0, 0), (201, None, 1, 0, 0), (299, None, 1, 0, 0), (201, "1", 1, 0, 0),
    (429, "1", 0, 1, 0), (429, "32", 0, 1, 0), (429, "0", 0, 1, 0), (429, "+5", 0, 1, 0),
    (429, None, 0, 0, 1), (429, "", 0, 0, 1), (429, "Wed, 02 Dec 2026 05:00:00 GMT", 0, 0, 1), (429, "1.5", 0, 0, 1),
    (503, "1", 0, 0, 1), (300, None, 0, 0, 1), (409, None, 0, 0, 1), (500, None, 0, 0, 1), (None, None, 0, 0, 1),
]


@pytest.mark.parametrize(("status", "retry_after", "succeeded", "throttled", "failed"), OUTCOMES)
def test_a_binding_counts_as_its_client_saw_it(counters: Counters, status: int | None, retry_after: str | None,
                                               succeeded: int, throttled: int, failed: int) -> None:
    counters.bind_outcome(status, retry_after)
    assert (counters.binds_succeeded, counters.binds_throttled, counters.binds_failed) == (succeeded, throttled, failed)
    assert counters.stats(None)["bindsTotal"] == {"succeeded": succeeded, "throttled": throttled, "failed": failed}


def test_requests_are_counted_by_resource(counters: Counters) -> None:
    for ident in (bind("a"), bind("b"), get_pod("a")):
        counters.request(ident)
    stats = counters.stats(None)
    assert stats["requests"] == 3 and stats["active"] is None and stats["rules"] == {}
    assert stats["requestsByResource"] == {"create pods": 2, "get pods": 1}


def test_a_reset_zeroes_the_view_and_keeps_the_totals(counters: Counters) -> None:
    engine = Engine(profile({"name": "r", "match": BIND_MATCH, "fault": {"abort": {"status": 500}}}, name="p"),
                    epoch=1, seed=1, started_at=0.0)
    ident = bind("a")
    counters.request(ident)
    decision = engine.decide(ident, 0.0)
    assert decision is not None
    counters.performed(decision, ident, action="respond 500")
    counters.note("upstream-lost", reason="test")
    counters.bind_outcome(500)
    counters.bind_outcome(429, "1")
    counters.reset(engine)
    stats = counters.stats(engine)
    assert (stats["requests"], stats["injectionsTotal"], stats["events"]) == (0, 0, {})
    assert stats["rules"]["r"]["injected"] == 0 and stats["active"] == {"profile": "p", "epoch": 1}
    assert stats["bindsTotal"] == {"succeeded": 0, "throttled": 1, "failed": 1}, "never reset: samplers diff them"
    assert counters.requests == 1 and counters.injections_total[("p", "r", "abort")] == 1
    assert counters.events_total["upstream-lost"] == 1
    assert [r["event"] for r in counters.journal.since(0)] == ["inject", "upstream-lost"]
