"""Activation, epochs, TTL revert, stats and the journal, with a fake clock."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from kube_fault_proxy.proxy.journal import Journal
from kube_fault_proxy.proxy.profiles.library import Entry, Library
from kube_fault_proxy.proxy.requests.identity import parse
from kube_fault_proxy.proxy.runtime import ProfileInUse, Runtime, UnknownProfile

from tests.support.builders import BIND_MATCH, bind, profile


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(tmp_path: Path, schedule: Callable[..., object] | None = None) -> tuple[Runtime, Clock]:
    clock = Clock()
    lib = Library({
        "fail": Entry(profile({"name": "r", "match": BIND_MATCH, "fault": {"abort": {"status": 500}}},
                              name="fail", seed=7), "test"),
        "other": Entry(profile(name="other"), "test"),
    })
    journal = Journal(tmp_path / "j.jsonl", wall=lambda: 5.0)
    return Runtime(lib, journal, clock, lambda: 5.0, schedule, new_seed=lambda: 1234), clock


def test_pass_through_until_activated(tmp_path: Path) -> None:
    rt, _ = make(tmp_path)
    assert rt.decide(bind("a")) is None
    rt.activations.activate("fail")
    d = rt.decide(bind("a"))
    assert d is not None and (d.profile, d.epoch, d.seed) == ("fail", 1, 7)


def test_seed_override_and_random_seed_is_recorded(tmp_path: Path) -> None:
    rt, _ = make(tmp_path)
    assert rt.activations.activate("fail", seed=99).engine.seed == 99
    assert rt.activations.activate("other").engine.seed == 1234
    records = rt.journal.since(0)
    assert [r["event"] for r in records] == ["activate", "deactivate", "activate"]
    assert records[1]["reason"] == "replaced"
    assert records[2]["seed"] == 1234


def test_unknown_profile_changes_nothing(tmp_path: Path) -> None:
    rt, _ = make(tmp_path)
    rt.activations.activate("fail")
    with pytest.raises(UnknownProfile):
        rt.activations.activate("nope")
    assert rt.activations.active is not None and rt.activations.active.engine.profile.name == "fail"
    assert rt.activations.epoch == 1


def test_ttl_reverts_lazily_on_the_next_request(tmp_path: Path) -> None:
    rt, clock = make(tmp_path)
    rt.activations.activate("fail", ttl_seconds=30)
    clock.now += 29.9
    assert rt.decide(bind("a")) is not None
    clock.now += 0.1
    assert rt.decide(bind("b")) is None
    assert rt.activations.active is None
    assert rt.journal.since(0)[-1] == {"seq": 2, "time": 5.0, "event": "deactivate",
                                       "profile": "fail", "epoch": 1, "reason": "ttl"}


def test_ttl_timer_reverts_and_ignores_stale_epochs(tmp_path: Path) -> None:
    timers: list[tuple[float, Callable[[], None]]] = []
    rt, _ = make(tmp_path, schedule=lambda delay, fn: timers.append((delay, fn)))
    rt.activations.activate("fail", ttl_seconds=10)
    rt.activations.activate("other", ttl_seconds=20)
    assert [t[0] for t in timers] == [10, 20]
    timers[0][1]()  # the first activation's timer fires late: must not end the second
    assert rt.activations.active is not None and rt.activations.active.engine.profile.name == "other"
    timers[1][1]()
    assert rt.activations.active is None


def test_active_profile_cannot_be_deleted(tmp_path: Path) -> None:
    rt, _ = make(tmp_path)
    rt.activations.activate("fail")
    with pytest.raises(ProfileInUse):
        rt.activations.delete_profile("fail")
    assert rt.activations.delete_profile("other") is True
    assert rt.activations.delete_profile("other") is False


def test_stats_and_journal_agree(tmp_path: Path) -> None:
    rt, _ = make(tmp_path)
    rt.activations.activate("fail")
    for pod in ("a", "b", "c"):
        ident = bind(pod)
        d = rt.decide(ident)
        assert d is not None
        rt.counters.performed(d, ident, action=d.plan.describe())
    stats = rt.stats()
    assert stats["requests"] == 3 and stats["injectionsTotal"] == 3
    assert stats["rules"]["r"]["injected"] == 3
    injects = [r for r in rt.journal.since(0) if r["event"] == "inject"]
    assert [r["request"]["name"] for r in injects] == ["a", "b", "c"]
    assert all(r["epoch"] == 1 and r["rule"] == "r" and r["action"] == "respond 500" for r in injects)
    rt.reset_stats()
    zero = rt.stats()
    assert zero["requests"] == 0 and zero["injectionsTotal"] == 0 and zero["rules"]["r"]["injected"] == 0
    assert rt.counters.injections_total[("fail", "r", "abort")] == 3  # /metrics counters never go back


def test_journal_is_flushed_per_record_and_numbering_survives_restart(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    j = Journal(path, wall=lambda: 1.0)
    j.append("activate", profile="x")
    j.append("inject", rule="r")
    lines = path.read_text().splitlines()  # readable before close: flushed
    assert [json.loads(x)["seq"] for x in lines] == [1, 2]
    again = Journal(path, wall=lambda: 2.0)
    assert again.append("activate")["seq"] == 3
    assert [r["seq"] for r in j.since(1)] == [2]


def test_unparsable_requests_are_decided_counted_and_journaled_once_per_kind(tmp_path: Path) -> None:
    rt, _ = make(tmp_path)
    rt.activations.activate("fail")
    deep = b'{"target": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    decisions = [rt.decide(parse("POST", f"/api/v1/namespaces/default/pods/p{i}/binding", body=body,
                                 content_type="application/json"))
                 for i, body in enumerate([deep, deep, b"not json", deep])]
    assert all(d is not None and d.rule == "r" for d in decisions)  # the rule needs no target node
    assert rt.stats()["events"] == {"request-unparsable": 4}
    records = [r for r in rt.journal.since(0) if r["event"] == "request-unparsable"]
    assert [(r["kind"], r["request"]["name"]) for r in records] == [
        ("binding body: JSON nested too deep", "p0"), ("binding body: not JSON", "p2")]
