"""Engine decisions for every `when` field, rule order, and determinism under a seed."""

from __future__ import annotations

from typing import Any

import pytest
from kube_fault_proxy.proxy.engine import Engine
from kube_fault_proxy.proxy.requests.identity import RequestIdentity

from tests.support.builders import BIND_MATCH, bind, get_pod, profile, watch_pods

ABORT = {"abort": {"status": 500}}


def engine(*rules: dict[str, Any], seed: int = 1) -> Engine:
    return Engine(profile(*rules), epoch=3, seed=seed, started_at=100.0)


def injected(e: Engine, requests: list[RequestIdentity], now: float = 100.0) -> list[int]:
    """1-based indices of the requests that got a fault."""
    return [i for i, r in enumerate(requests, 1) if e.decide(r, now) is not None]


def binds(n: int) -> list[RequestIdentity]:
    return [bind(f"p{i}") for i in range(n)]


def test_no_rules_no_faults() -> None:
    assert injected(engine(), binds(5)) == []


def test_match_selects_requests() -> None:
    e = engine({"name": "r", "match": BIND_MATCH, "fault": ABORT})
    assert injected(e, [get_pod("a"), bind("a"), watch_pods(), bind("b")]) == [2, 4]


def test_decision_is_stamped() -> None:
    e = engine({"name": "r", "match": BIND_MATCH, "fault": ABORT}, seed=9)
    d = e.decide(bind("a"), 100.0)
    assert d is not None
    assert d.stamp() == {"profile": "test", "epoch": 3, "seed": 9, "rule": "r", "fault": "abort",
                         "match": 1, "injection": 1}
    assert d.plan.describe() == "respond 500"


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        ({"afterMatches": 3}, [4, 5, 6, 7, 8, 9, 10]),
        ({"every": 3}, [3, 6, 9]),
        ({"maxInjections": 2}, [1, 2]),
        ({"afterMatches": 2, "every": 2, "maxInjections": 3}, [4, 6, 8]),
    ],
    ids=["afterMatches", "every", "maxInjections", "combined"],
)
def test_count_fields(when: dict[str, Any], expected: list[int]) -> None:
    e = engine({"name": "r", "match": BIND_MATCH, "when": when, "fault": ABORT})
    assert injected(e, binds(10)) == expected


def test_per_object_max() -> None:
    e = engine({"name": "r", "match": BIND_MATCH, "when": {"perObjectMax": 1}, "fault": ABORT})
    requests = [bind("a"), bind("a"), bind("b"), bind("a"), bind("b"), bind("c")]
    assert injected(e, requests) == [1, 3, 6]


def test_time_window_after_and_for() -> None:
    e = engine({"name": "r", "match": BIND_MATCH, "when": {"after": "10s", "for": "5s"},
                "fault": ABORT})
    times = [100.0, 109.9, 110.0, 114.9, 115.0, 200.0]
    assert [e.decide(bind(f"p{t}"), t) is not None for t in times] == [
        False, False, True, True, False, False]


def test_trigger_arms_the_rule_at_the_nth_trigger_request() -> None:
    rule = {"name": "r", "match": {"verbs": ["get"], "resources": ["pods"]},
            "when": {"trigger": {"match": BIND_MATCH, "count": 3}}, "fault": ABORT}
    e = engine(rule)
    seq = [get_pod("x"), bind("a"), bind("b"), get_pod("x"), bind("c"), get_pod("x"), get_pod("y")]
    assert injected(e, seq) == [6, 7]
    assert e.counters()["r"]["triggerSeen"] == 3


def test_first_rule_that_injects_wins() -> None:
    e = engine(
        {"name": "first", "match": BIND_MATCH, "when": {"every": 2}, "fault": ABORT},
        {"name": "second", "match": BIND_MATCH, "fault": {"reset": {}}},
    )
    rules = [d.rule for d in (e.decide(r, 100.0) for r in binds(4)) if d]
    assert rules == ["second", "first", "second", "first"]


def test_fault_that_does_not_apply_is_skipped() -> None:
    e = engine({"name": "ctf", "match": {"resources": ["pods"]},
                "fault": {"commitThenFail": {"abort": {"status": 500}}}})
    assert e.decide(watch_pods(), 100.0) is None
    assert e.counters()["ctf"]["matched"] == 0
    assert e.decide(get_pod("a"), 100.0) is not None


def test_probability_zero_and_one() -> None:
    never = engine({"name": "r", "probability": 0.0, "fault": ABORT})
    always = engine({"name": "r", "probability": 1.0, "fault": ABORT})
    assert injected(never, binds(50)) == []
    assert len(injected(always, binds(50))) == 50


def test_probability_rate_is_close_to_its_value() -> None:
    e = engine({"name": "r", "probability": 0.3, "fault": ABORT})
    n = len(injected(e, binds(2000)))
    assert 520 <= n <= 680  # 0.3 * 2000 = 600, about ±4 sigma


def test_same_seed_same_decisions_different_seed_differs() -> None:
    rules = ({"name": "r", "match": BIND_MATCH, "probability": 0.5,
              "fault": {"delay": {"seconds": 1, "jitterSeconds": 0.5}}},)

    def run(seed: int) -> list[tuple[int, float]]:
        e = engine(*rules, seed=seed)
        out = []
        for i, r in enumerate(binds(200)):
            d = e.decide(r, 100.0)
            if d is not None:
                out.append((i, d.plan.before[0].seconds))  # type: ignore[union-attr]
        return out

    assert run(42) == run(42)
    assert run(42) != run(43)


def test_rules_draw_from_independent_streams() -> None:
    """Traffic matched by one rule never shifts another rule's decisions."""
    bind_rule = {"name": "b", "match": BIND_MATCH, "probability": 0.5, "fault": ABORT}
    get_rule = {"name": "g", "match": {"verbs": ["get"]}, "probability": 0.5, "fault": ABORT}
    alone = engine(bind_rule, get_rule, seed=5)
    mixed = engine(bind_rule, get_rule, seed=5)
    only_binds = [i for i, r in enumerate(binds(100)) if alone.decide(r, 100.0)]
    interleaved = []
    for i, r in enumerate(binds(100)):
        mixed.decide(get_pod(f"x{i}"), 100.0)
        if mixed.decide(r, 100.0):
            interleaved.append(i)
    assert only_binds == interleaved


def test_target_node_matching() -> None:
    e = engine({"name": "r", "match": {"targetNodes": ["node-1*"]}, "fault": ABORT})
    seq = [bind("a", "node-1"), bind("b", "node-2"), bind("c", "node-10"), get_pod("a")]
    assert injected(e, seq) == [1, 3]


@pytest.mark.parametrize(
    ("match", "hits"),
    [
        ({"namespaces": ["team-*"]}, ["team-a/p", "team-b/p"]),
        ({"names": ["p?"]}, ["default/p1"]),
        ({"names": ["p"]}, ["team-a/p", "team-b/p"]),
        ({"groups": ["core"]}, ["default/p1", "team-a/p", "team-b/p"]),
        ({"groups": ["apps"]}, []),
    ],
)
def test_selector_globs(match: dict[str, Any], hits: list[str]) -> None:
    e = engine({"name": "r", "match": match, "fault": ABORT})
    reqs = {"default/p1": bind("p1"), "team-a/p": bind("p", ns="team-a"),
            "team-b/p": bind("p", ns="team-b")}
    assert [k for k, r in reqs.items() if e.decide(r, 100.0)] == hits


def test_expire_with_fail_relist_fails_the_next_relist_of_that_resource() -> None:
    from kube_fault_proxy.proxy.requests.identity import parse

    e = engine({"name": "x", "match": {"resources": ["pods"]}, "when": {"maxInjections": 1},
                "fault": {"expire": {"failRelist": True}}})
    first = e.decide(parse("GET", "/api/v1/pods", "watch=1&resourceVersion=7"), 100.0)
    assert first is not None and first.fault == "expire"
    assert e.decide(parse("GET", "/api/v1/nodes"), 100.0) is None  # another resource: untouched
    relist = e.decide(parse("GET", "/api/v1/pods", "limit=500"), 100.0)
    assert relist is not None and relist.rule == "x"
    assert relist.plan.before[0].reply.status == 410  # type: ignore[union-attr]
    assert e.decide(parse("GET", "/api/v1/pods", "limit=500"), 100.0) is None  # only the next one


def test_the_relist_may_be_a_watch_list() -> None:
    from kube_fault_proxy.proxy.requests.identity import parse

    e = engine({"name": "x", "match": {"resources": ["pods"]}, "when": {"maxInjections": 1},
                "fault": {"expire": {"failRelist": True}}})
    e.decide(parse("GET", "/api/v1/pods", "watch=1&resourceVersion=7"), 100.0)
    watch_list = parse("GET", "/api/v1/pods", "watch=1&sendInitialEvents=true&allowWatchBookmarks=true")
    assert watch_list.relist
    d = e.decide(watch_list, 100.0)
    assert d is not None and d.fault == "expire"


def test_outage_trigger_at_the_nth_bind() -> None:
    e = engine({"name": "o", "match": BIND_MATCH, "when": {"trigger": {"match": BIND_MATCH, "count": 200},
                                                           "maxInjections": 1},
                "fault": {"outage": {"seconds": 10}}})
    assert injected(e, binds(400)) == [200]


def test_an_answered_trigger_counts_2xx_answers_not_arrivals() -> None:
    e = engine({"name": "o", "match": BIND_MATCH,
                "when": {"trigger": {"match": BIND_MATCH, "count": 3, "answered": True}, "maxInjections": 1},
                "fault": {"outage": {"seconds": 10}}})
    assert e.counts_answers
    sent = binds(10)
    assert injected(e, sent[:6]) == []  # six sent, none answered yet: not armed
    e.answered(sent[0], 201)
    e.answered(sent[1], 409)  # not a success
    e.answered(get_pod("x"), 200)  # not a match
    e.answered(sent[2], 201)
    assert injected(e, sent[6:7]) == []
    e.answered(sent[3], 201)  # the third success arms it
    assert injected(e, sent[7:10]) == [1]
    assert e.counters()["o"]["triggerSeen"] == 3


def test_a_plain_trigger_ignores_answers() -> None:
    e = engine({"name": "o", "match": BIND_MATCH, "when": {"trigger": {"match": BIND_MATCH, "count": 2}},
                "fault": ABORT})
    assert not e.counts_answers
    e.answered(bind("a"), 201)
    assert injected(e, binds(3)) == [2, 3]
