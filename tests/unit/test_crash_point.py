"""crashPoint (proxy.faults.crash_point): a committed write's answer held, journaled as the moment to crash
the scheduler; its schema, its turn in the engine, and the addon driven with mitmproxy's test flows."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.proxy.engine import Engine
from kube_fault_proxy.proxy.faults.crash_point import CrashPoint
from kube_fault_proxy.proxy.faults.plan import HoldAnswer
from kube_fault_proxy.proxy.mitm.addon import FaultAddon
from kube_fault_proxy.proxy.mitm.binds import BindAccounting, BindOutcomes, BindReads
from kube_fault_proxy.proxy.mitm.crash_points import CrashPoints
from kube_fault_proxy.proxy.mitm.held import HeldAnswers
from kube_fault_proxy.proxy.profiles.loader import ProfileError, load_text
from kube_fault_proxy.proxy.requests.identity import parse
from kube_fault_proxy.proxy.runtime import Runtime
from mitmproxy.addons import proxyserver
from mitmproxy.connection import ConnectionState
from mitmproxy.test import taddons

from tests.support.builders import BIND_MATCH, bind, profile
from tests.support.mitm import answer, binding, events, exchange, flow, runtime

HEADER = "apiVersion: kube-fault-proxy/v1\nkind: FaultProfile\nmetadata: {name: p}\n"


@pytest.mark.parametrize(("method", "path", "query", "applies"), [
    ("POST", "/api/v1/namespaces/ns/pods/a/binding", "", True),
    ("POST", "/api/v1/namespaces/ns/pods", "", True),
    ("PUT", "/api/v1/namespaces/ns/pods/a", "", True),
    ("PATCH", "/api/v1/namespaces/ns/pods/a/status", "", True),
    ("DELETE", "/api/v1/namespaces/ns/pods/a", "", True),
    ("DELETE", "/api/v1/namespaces/ns/pods", "", True),  # deletecollection
    ("GET", "/api/v1/namespaces/ns/pods/a", "", False),
    ("GET", "/api/v1/pods", "", False),
    ("GET", "/api/v1/pods", "watch=1", False),
    ("POST", "/healthz", "", False),
])
def test_it_applies_to_writes_only(method: str, path: str, query: str, applies: bool) -> None:
    assert CrashPoint().applies_to(parse(method, path, query)) is applies


def rule_yaml(fault: str, when: str = "") -> str:
    return HEADER + f"spec:\n  rules:\n    - name: r\n{when}      fault: {{crashPoint: {fault}}}\n"


def test_the_loader_takes_a_hold_and_defaults_it() -> None:
    p = load_text(rule_yaml("{}"))
    spec = p.spec.rules[0].fault.spec
    assert isinstance(spec, CrashPoint) and spec.holdSeconds == 30.0
    assert load_text(rule_yaml("{holdSeconds: 1.5}")).spec.rules[0].fault.spec == CrashPoint(holdSeconds=1.5)


@pytest.mark.parametrize(("fault", "expected"), [
    ("{holdSeconds: 0}", "p.yaml:7:41: spec.rules[0].fault.crashPoint.holdSeconds: Input should be greater than 0"),
    ("{holdSeconds: 601}",
     "p.yaml:7:41: spec.rules[0].fault.crashPoint.holdSeconds: Input should be less than or equal to 600"),
    ("{holdSeconds: soon}", "p.yaml:7:41: spec.rules[0].fault.crashPoint.holdSeconds: Input should be a valid number"),
    ("{hold: 5}", "p.yaml:7:28: spec.rules[0].fault.crashPoint.hold: unknown field"),
], ids=["zero", "over-600", "not-a-number", "unknown-key"])
def test_the_loader_rejects_a_bad_hold_naming_the_field(fault: str, expected: str) -> None:
    with pytest.raises(ProfileError) as e:
        load_text(rule_yaml(fault), "p.yaml")
    assert expected in [str(p) for p in e.value.problems], [str(p) for p in e.value.problems]


def test_a_correlated_crash_names_its_components_each_with_its_restart() -> None:
    spec = load_text(rule_yaml("{holdSeconds: 5, kill: [{component: scheduler, restartAfterSeconds: 1}, "
                               "{component: kube-controller-manager, restartAfterSeconds: 7.5}]}")).spec.rules[0].fault.spec
    assert isinstance(spec, CrashPoint)
    assert [(k.component, k.restartAfterSeconds) for k in spec.kill] == [("scheduler", 1.0),
                                                                         ("kube-controller-manager", 7.5)]
    [hold] = spec.plan(bind("p"), random.Random(1)).after
    assert hold == HoldAnswer(5.0, (("scheduler", 1.0), ("kube-controller-manager", 7.5)))
    plan = spec.plan(bind("p"), random.Random(1))
    assert plan.describe() == "forward, then hold the committed answer 5s (kill scheduler, kube-controller-manager)"
    default = CrashPoint()
    assert default.kill == [] and default.plan(bind("p"), random.Random(1)).after == (HoldAnswer(30.0),), \
        "no kill: the scheduler alone, as before"


@pytest.mark.parametrize(("kill", "expected"), [
    ("[{component: kube-apiserver, restartAfterSeconds: 1}]",
     "spec.rules[0].fault.crashPoint.kill[0].component: Input should be 'scheduler' or 'kube-controller-manager'"),
    ("[{component: scheduler}]", "spec.rules[0].fault.crashPoint.kill[0].restartAfterSeconds: required field is missing"),
    ("[{component: scheduler, restartAfterSeconds: 601}]",
     "spec.rules[0].fault.crashPoint.kill[0].restartAfterSeconds: Input should be less than or equal to 600"),
    ("[{component: scheduler, restartAfterSeconds: -1}]",
     "spec.rules[0].fault.crashPoint.kill[0].restartAfterSeconds: Input should be greater than or equal to 0"),
    ("[{component: scheduler, restartAfterSeconds: 1, signal: TERM}]",
     "spec.rules[0].fault.crashPoint.kill[0].signal: unknown field"),
    ("[{component: scheduler, restartAfterSeconds: 1}, {component: scheduler, restartAfterSeconds: 2}]",
     "p.yaml:7:34: spec.rules[0].fault.crashPoint.kill: a component is named twice: scheduler, scheduler"),
], ids=["unknown-component", "no-restart", "restart-too-late", "negative", "unknown-key", "twice"])
def test_a_bad_kill_is_refused_naming_the_field(kill: str, expected: str) -> None:
    with pytest.raises(ProfileError) as e:
        load_text(rule_yaml(f"{{kill: {kill}}}"), "p.yaml")
    assert any(expected in str(p) for p in e.value.problems), [str(p) for p in e.value.problems]


def engine(*rules: dict[str, Any]) -> Engine:
    return Engine(profile(*rules), epoch=3, seed=1, started_at=100.0)


def test_a_rule_holds_one_answer_unless_told_more() -> None:
    once = engine({"name": "c", "match": BIND_MATCH, "fault": {"crashPoint": {}}})
    assert [once.decide(bind(f"p{i}"), 100.0) is not None for i in range(4)] == [True, False, False, False]
    three = engine({"name": "c", "match": BIND_MATCH, "when": {"maxInjections": 3}, "fault": {"crashPoint": {}}})
    assert [three.decide(bind(f"p{i}"), 100.0) is not None for i in range(5)] == [True, True, True, False, False]


def test_a_turn_given_back_goes_to_the_next_write() -> None:
    e = engine({"name": "c", "match": BIND_MATCH, "when": {"afterMatches": 2}, "fault": {"crashPoint": {}}})
    decided = [e.decide(bind(f"p{i}"), 100.0) for i in range(4)]
    assert [d is not None for d in decided] == [False, False, True, False]
    first = decided[2]
    assert first is not None and first.fault == "crashPoint" and first.match == 3
    assert first.plan.describe() == "forward, then hold the committed answer 30s"
    e.refund(first, bind("p2"))  # its write committed nothing
    again = e.decide(bind("p4"), 100.0)
    assert again is not None and again.match == 5 and again.injection == 1
    assert e.decide(bind("p5"), 100.0) is None
    assert e.counters()["c"]["injected"] == 1


def test_a_turn_given_back_to_an_older_activation_changes_nothing() -> None:
    e = engine({"name": "c", "match": BIND_MATCH, "fault": {"crashPoint": {}}})
    d = e.decide(bind("p0"), 100.0)
    assert d is not None
    newer = Engine(e.profile, epoch=4, seed=1, started_at=100.0)
    assert newer.decide(bind("p1"), 100.0) is not None
    newer.refund(d, bind("p0"))
    assert newer.decide(bind("p2"), 100.0) is None


def with_accounting(rt: Runtime, chain: list[Any]) -> list[Any]:
    """The fault addon and the crash points between the bind accounting's two halves, as in serve's chain (it counts
    what a hold left)."""
    outcomes = BindOutcomes(rt.counters.bind_outcome)
    return [BindReads(outcomes), *chain, BindAccounting(outcomes)]


def run(tmp_path: Path, fault: dict[str, Any], test: Callable[[Runtime, list[Any]], Awaitable[None]],
        when: dict[str, Any] | None = None, match: dict[str, Any] = BIND_MATCH) -> None:
    rule: dict[str, Any] = {"name": "crash", "match": match, "fault": fault}
    if when is not None:
        rule["when"] = when
    rt = runtime(tmp_path, profile(rule, name="p", seed=1))
    rt.activations.activate("p")

    async def main() -> None:
        with taddons.context(proxyserver.Proxyserver()):
            held = HeldAnswers()
            await test(rt, [FaultAddon(rt, held), CrashPoints(rt.counters.note, held)])

    asyncio.run(main())


def test_a_committed_answer_is_held_journaled_then_relayed(tmp_path: Path) -> None:
    async def test(rt: Runtime, chain: list[Any]) -> None:
        f = binding("web-1", "n7")
        started = time.monotonic()
        await exchange(with_accounting(rt, chain), f, answer(201, b'{"kind":"Status","status":"Success","code":201}'))
        held = time.monotonic() - started
        assert 0.2 * 0.9 <= held < 2
        assert f.response is not None and f.response.status_code == 201 and f.error is None
        [inject] = events(rt, "inject")
        assert (inject["fault"], inject["action"], inject["upstreamStatus"]) == \
            ("crashPoint", "forward, then hold the committed answer 0.2s", 201)
        [point] = events(rt, "crash-point")
        assert point["rule"] == "crash" and point["profile"] == "p" and point["match"] == 1
        assert point["request"]["name"] == "web-1" and point["request"]["targetNode"] == "n7"
        assert (point["upstreamStatus"], point["holdSeconds"], point["resourceVersion"]) == (201, 0.2, None)
        [released] = events(rt, "crash-point-released")
        assert released["outcome"] == "relayed" and 0.18 <= released["heldSeconds"] < 2
        assert point["seq"] < released["seq"]
        assert rt.stats()["bindsTotal"] == {"succeeded": 1, "throttled": 0, "failed": 0}

    run(tmp_path, {"crashPoint": {"holdSeconds": 0.2}}, test)


def test_the_committed_resource_version_is_journaled_when_the_answer_has_one(tmp_path: Path) -> None:
    async def test(rt: Runtime, chain: list[Any]) -> None:
        body = json.dumps({"kind": "Pod", "metadata": {"name": "a", "resourceVersion": "4711"}}, separators=(",", ":")).encode()
        f = flow("PUT", "/api/v1/namespaces/default/pods/a", body, [(b"content-type", b"application/json")])
        await exchange(chain, f, answer(200, body))
        [point] = events(rt, "crash-point")
        assert point["resourceVersion"] == "4711" and point["request"]["verb"] == "update"

    run(tmp_path, {"crashPoint": {"holdSeconds": 0.01}}, test, match={"verbs": ["update"], "resources": ["pods"]})


def test_a_held_answer_whose_client_left_is_dropped(tmp_path: Path) -> None:
    async def test(rt: Runtime, chain: list[Any]) -> None:
        f = binding("web-2")
        asyncio.get_running_loop().call_later(0.1, setattr, f.client_conn, "state", ConnectionState.CLOSED)
        started = time.monotonic()
        await exchange(with_accounting(rt, chain), f, answer(201))
        assert time.monotonic() - started < 5, "the hold ended with its client, not after 30 s"
        assert f.error is not None, "nothing relayed"
        assert [r["event"] for r in events(rt, "crash-point", "crash-point-released")] == \
            ["crash-point", "crash-point-released"]
        [released] = events(rt, "crash-point-released")
        assert released["outcome"] == "dropped" and released["request"]["name"] == "web-2"
        assert rt.stats()["bindsTotal"] == {"succeeded": 0, "throttled": 0, "failed": 1}

    run(tmp_path, {"crashPoint": {}}, test)


def test_an_answer_that_committed_nothing_is_not_held_and_the_next_commit_is(tmp_path: Path) -> None:
    async def test(rt: Runtime, chain: list[Any]) -> None:
        conflict = binding("web-3")
        started = time.monotonic()
        await exchange(chain, conflict, answer(409))
        assert time.monotonic() - started < 0.5, "not held"
        assert conflict.response is not None and conflict.response.status_code == 409
        assert events(rt, "inject", "crash-point") == []
        [skipped] = events(rt, "commit-skipped")
        assert (skipped["fault"], skipped["upstreamStatus"]) == ("crashPoint", 409)
        committed = binding("web-4")
        await exchange(chain, committed, answer(201))
        [point] = events(rt, "crash-point")
        assert point["request"]["name"] == "web-4" and point["match"] == 2 and point["injection"] == 1
        late = binding("web-5")
        await exchange(chain, late, answer(201))
        assert len(events(rt, "crash-point")) == 1, "one crash point per rule unless told more"

    run(tmp_path, {"crashPoint": {"holdSeconds": 0.05}}, test)
