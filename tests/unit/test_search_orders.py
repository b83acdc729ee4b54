"""`search orders`: a stored case under N event orders (rig/search/orders.py, cli/search_orders.py)."""

from __future__ import annotations

import contextlib
import json
import types
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.cli.main import main
from kube_fault_proxy.rig.search import orders
from kube_fault_proxy.rig.search.genome import Genome
from kube_fault_proxy.rig.search.trial import TrialResult

ABORT = {"name": "r1-abort-binding", "probability": 0.5,
         "match": {"resources": ["pods"], "subresources": ["binding"], "verbs": ["create"]},
         "fault": {"abort": {"status": 500}}}
DELAY = {"name": "r2-delay-pod-events", "match": {"resources": ["pods"], "verbs": ["watch"]},
         "fault": {"delayEvents": {"seconds": 1, "jitterSeconds": 2}}}
HOLD = {"name": "r3-hold-node-events", "probability": 0.5, "match": {"resources": ["nodes"], "verbs": ["watch"]},
        "fault": {"holdEvents": {"maxSeconds": 5, "untilEvent": {"resource": "pods"}}}}
STEADY = {**DELAY, "name": "r4-steady-delay", "fault": {"delayEvents": {"seconds": 1}}}


def _genome(*rules: dict[str, Any]) -> Genome:
    return Genome(rules=tuple(rules), pods=20, seed=7, nodes=2)


@pytest.mark.parametrize(("rule", "draws"), [(DELAY, True), (HOLD, True), (STEADY, False), (ABORT, False),
                                             ({**HOLD, "probability": 1.0}, False)])
def test_a_rule_draws_an_order_when_it_orders_events_by_its_stream(rule: dict[str, Any], draws: bool) -> None:
    assert orders.draws_an_order(rule) is draws


def test_an_order_renames_only_the_rules_that_draw_one_so_the_rest_draw_as_before() -> None:
    g = _genome(ABORT, DELAY, HOLD, STEADY)
    one, two = orders.reordered(g, 1), orders.reordered(g, 2)
    assert [r["name"] for r in one.rules] == ["r1-abort-binding", "r2-delay-pod-events-o1", "r3-hold-node-events-o1",
                                             "r4-steady-delay"]
    assert [r["name"] for r in two.rules][1:3] == ["r2-delay-pod-events-o2", "r3-hold-node-events-o2"]
    assert (one.seed, one.pods, one.nodes, one.shape) == (g.seed, g.pods, g.nodes, g.shape)  # the same workload
    assert one.rules[0] is g.rules[0] and one.rules[1]["fault"] == DELAY["fault"]
    one.profile()  # still a profile the strict loader takes


def test_a_long_name_is_shortened_to_a_rules_name() -> None:
    long = {**DELAY, "name": "a" * 60 + "-b"}
    name = orders.reordered(_genome(long), 12).rules[0]["name"]
    assert len(name) <= 63 and name.endswith("-o12") and "--" not in name
    orders.reordered(_genome(long), 12).profile()


def test_a_case_with_nothing_that_draws_an_order_is_refused() -> None:
    with pytest.raises(ValueError, match="nothing to reorder"):
        orders.reordered(_genome(ABORT, STEADY), 1)


def _state(pending: int, nodes_of_a: str = "kfp-node-0001") -> dict[str, Any]:
    return {"pods": 20, "pods/pending": pending, "pods/bound": 20 - pending, "pod/a/node": nodes_of_a}


def _fake(monkeypatch: pytest.MonkeyPatch, clean: list[dict[str, Any]], runs: list[dict[str, Any] | None],
          broken: list[str] | None = None, acts: bool = True) -> list[tuple[str, Genome]]:
    """run_trial and the rig faked: clean runs end in `clean`, orders in `runs` (None: the trial failed); with
    `acts`, every rule of an order injected."""
    from kube_fault_proxy.rig.search import orders as mod
    from kube_fault_proxy.rig.search.trial import Rig

    seen: list[tuple[str, Genome]] = []
    ends = iter([*clean, *runs])

    @contextlib.contextmanager
    def running(*args: object, devices: bool = False, gangs: bool = False,
                kube_scheduler_patch: Path | None = None) -> Any:
        yield types.SimpleNamespace(build="yunikorn v1.9.0")

    def trial(rig: object, genome: Genome, name: str, tier: object, note: object) -> TrialResult:
        seen.append((name, genome))
        end = next(ends)
        if end is None:
            return TrialResult(name, "yunikorn", genome, error="the load never settled")
        return TrialResult(name, "yunikorn", genome, end_state=end,
                           broken=list(broken or []) if name.startswith("clean") else [],
                           fired={r["name"] for r in genome.rules} if acts else set())

    monkeypatch.setattr(Rig, "running", running)
    monkeypatch.setattr(mod, "run_trial", trial)
    return seen


def _case(tmp_path: Path, *rules: dict[str, Any]) -> Path:
    minimal = {"rules": list(rules), "pods": 20, "action": None, "seed": 7, "nodes": 2}
    (tmp_path / "search.json").write_text(json.dumps({"minimal": minimal, "target": ["I1"], "scheduler": "yunikorn",
                                                      "nodes": 4}))
    return tmp_path


def test_two_end_states_under_two_orders_are_the_nondeterminism_finding(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # where pod a went varies in clean runs: masked; the pending count never did, and two orders differ on it
    clean = [_state(0, "kfp-node-0001"), _state(0, "kfp-node-0002"), _state(0, "kfp-node-0001")]
    seen = _fake(monkeypatch, clean, [_state(0, "kfp-node-0002"), _state(3), _state(0)])
    case = _case(tmp_path, ABORT, DELAY)
    assert main(["search", "orders", str(case), "--orders", "3", "--state-dir", str(tmp_path / "s")]) == 1
    assert [n for n, _ in seen] == ["clean-1", "clean-2", "clean-3", "order-1", "order-2", "order-3"]
    assert all(g.rules == () and g.seed == 7 for n, g in seen[:3])  # the same workload, no fault
    assert [g.rules[1]["name"] for _, g in seen[3:]] == [f"r2-delay-pod-events-o{k}" for k in (1, 2, 3)]
    doc = json.loads((case / "orders.json").read_text())
    assert doc["verdict"] == "nondeterministic" and doc["distinctEndStates"] == 2
    assert doc["masked"] == ["pod/a/node"] and doc["differing"] == {"pods/bound": [20, 17], "pods/pending": [0, 3]}
    assert [o["endStateIndex"] for o in doc["orders"]] == [1, 2, 1]
    out = capsys.readouterr().out
    assert "nondeterministic: 2 distinct end states over 3 orders" in out and "pods/pending: 0 | 3" in out


def test_one_end_state_under_every_order_exits_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(monkeypatch, [_state(0)] * 3, [_state(0), _state(0)])
    case = _case(tmp_path, HOLD)
    assert main(["search", "orders", str(case), "--orders", "2", "--json", str(tmp_path / "o.json"),
                 "--state-dir", str(tmp_path / "s")]) == 0
    assert json.loads((tmp_path / "o.json").read_text())["verdict"] == "one end state"


@pytest.mark.parametrize(("clean_broken", "runs"), [(["I1"], [_state(0), _state(0)]), (None, [_state(0), None])])
def test_no_verdict_when_a_clean_run_broke_something_or_an_order_failed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_broken: list[str] | None,
        runs: list[dict[str, Any] | None]) -> None:
    _fake(monkeypatch, [_state(0)] * 3, runs, clean_broken)
    case = _case(tmp_path, DELAY)
    assert main(["search", "orders", str(case), "--orders", "2", "--state-dir", str(tmp_path / "s")]) == 3
    assert json.loads((case / "orders.json").read_text())["verdict"].startswith("no verdict: ")


@pytest.mark.parametrize(("extra", "error"), [
    ([], "nothing to reorder"), (["--orders", "1"], "--orders must be at least 2"),
    (["--clean", "2"], "--clean at least 3"), (["--trial", "t9"], "no trial named 't9'")])
def test_refused_before_anything_starts(tmp_path: Path, extra: list[str], error: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    case = _case(tmp_path, ABORT)
    (case / "trials.jsonl").write_text(json.dumps({"name": "t1", "genome": {"rules": [DELAY], "pods": 20,
                                                                            "seed": 1}}) + "\n")
    assert main(["search", "orders", str(case), *extra, "--state-dir", str(tmp_path / "s")]) == 2
    assert error in capsys.readouterr().err and not (tmp_path / "s").exists()


def test_a_trial_of_the_search_can_be_the_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _fake(monkeypatch, [_state(0)] * 3, [_state(0), _state(0)])
    case = _case(tmp_path, ABORT)
    (case / "trials.jsonl").write_text("{cut\n" + json.dumps({"name": "t1", "genome": json.dumps(
        {"rules": [DELAY], "pods": 30, "action": None, "seed": 4})}) + "\n")
    assert main(["search", "orders", str(case), "--trial", "t1", "--orders", "2",
                 "--state-dir", str(tmp_path / "s")]) == 0
    assert {(g.pods, g.seed) for _, g in seen} == {(30, 4)}


def test_no_verdict_when_the_rules_that_reorder_never_acted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A watch rule acts on a watch opened after the profile is on: a case with nothing that reopens the target's
    watches may run every order unfaulted, and one end state then says nothing of event orders."""
    _fake(monkeypatch, [_state(0)] * 3, [_state(0), _state(0)], acts=False)
    case = _case(tmp_path, HOLD)
    assert main(["search", "orders", str(case), "--orders", "2", "--state-dir", str(tmp_path / "s")]) == 3
    doc = json.loads((case / "orders.json").read_text())
    assert doc["verdict"].startswith("no verdict: the rules that reorder events acted in 0 of 2 orders")
    assert [o["reordered"] for o in doc["orders"]] == [False, False]
    assert "reopens the target's watches" in capsys.readouterr().out
