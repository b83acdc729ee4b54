"""What a search records of what it searched: coverage per kind and rule form, shapes, origins, novelty, crash
points and invariants judged; the budgets and seeds in search.json and report.md; `--kinds all`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.cli.search import _kinds
from kube_fault_proxy.rig.search.coverage import coverage, lines
from kube_fault_proxy.rig.search.engine import Search
from kube_fault_proxy.rig.search.genome import Genome, fault_kind
from kube_fault_proxy.rig.search.grammar import ALL_KINDS, KNOWN_KINDS, VIEW_KINDS
from kube_fault_proxy.rig.search.outcome import UNFAULTED, Outcome, Settings
from kube_fault_proxy.rig.search.output import write
from kube_fault_proxy.rig.search.trial import SEARCH, Tier, TrialResult
from kube_fault_proxy.rig.search.waist import BINDING

WATCH = {"verbs": ["watch"], "resources": ["pods"]}


def rule(kind: str, match: str = "binding") -> dict[str, Any]:
    selector = BINDING if match == "binding" else WATCH
    return {"name": f"r1-{kind.lower()}-{match}", "match": dict(selector), "when": {"maxInjections": 1},
            "fault": {kind: {}}}


def trial(name: str, rules: tuple[dict[str, Any], ...], fired: frozenset[str] = frozenset(),
          broken: tuple[str, ...] = (), shape: str = "roomy", origin: str = "random", error: str | None = None,
          events: tuple[dict[str, Any], ...] = (), judged: tuple[str, ...] = ("stranded",)) -> TrialResult:
    return TrialResult(name, "yunikorn", Genome(rules=rules, shape=shape, origin=origin), broken=list(broken),
                       fired=set(fired), error=error, events=list(events),
                       check={"invariants": {i: {"holds": i not in broken} for i in judged}})


def test_each_kind_and_form_counts_the_trials_that_drew_it_injected_and_broke() -> None:
    crash, reset, abort = rule("crashPoint"), rule("resetUpstream"), rule("abort")
    trials = [
        trial("t0", (crash, reset), fired=frozenset({crash["name"]}), broken=("I5",), shape="tainted",
              events=({"event": "scheduler-killed"}, {"event": "scheduler-restarted"}),
              judged=("stranded", "I1", "I4")),
        trial("t1", (crash,), origin="mutate:seed"),
        trial("t2", (abort,), fired=frozenset({abort["name"]})),  # injected, broke nothing
        trial("t3", (abort,), error="ClusterError: gone"),  # errored: drew nothing that counts
    ]
    cov = coverage(trials, ("abort", "resetUpstream", "crashPoint", "staleList"), tokens=7, novel=2,
                   dead=["resetupstream-binding"])
    assert cov["kinds"] == {"abort": {"trials": 1, "injected": 1, "broke": 0},
                            "resetUpstream": {"trials": 1, "injected": 0, "broke": 0},
                            "crashPoint": {"trials": 2, "injected": 1, "broke": 1},
                            "staleList": {"trials": 0, "injected": 0, "broke": 0}}  # asked, never drawn: a row
    assert cov["forms"]["crashpoint-binding"] == {"trials": 2, "injected": 1, "broke": 1}
    assert cov["shapes"] == {"roomy": 3, "tainted": 1} and cov["origins"] == {"fresh": 3, "mutate:seed": 1}
    assert cov["crashPoints"] == 1 and cov["errors"] == 1 and cov["deadForms"] == ["resetupstream-binding"]
    assert cov["invariantsJudged"] == ["I1", "I4", "stranded"]
    assert (cov["noveltyTokens"], cov["novelTrials"]) == (7, 2)
    text = "\n".join(lines(cov))
    assert "| crashPoint | 2 | 1 | 1 |" in text and "| staleList | 0 | 0 | 0 |" in text
    assert "kinds that never fired: resetUpstream, staleList" in text
    assert "crash points acted on (scheduler killed and restarted): 1" in text and "not I5" not in text


def test_kube_scheduler_coverage_does_not_mention_yunikorns_i5() -> None:
    cov = coverage([trial("t0", (rule("abort"),))], ("abort",), tokens=0, novel=0)
    assert "I5" not in "\n".join(lines(cov))


def fake_trial(self: Search, scheduler: str, genome: Genome, name: str, tier: Tier = SEARCH) -> TrialResult:
    """A fault fires unless the seed says otherwise; abort strands pods; every trial shows one new token."""
    kinds = {fault_kind(r) for r in genome.rules}
    fired = {r["name"] for r in genome.rules} if genome.seed % 3 else set()
    broken = ["stranded"] if "abort" in kinds and fired else []
    return TrialResult(name, scheduler, genome, broken=broken, injections=len(fired), fired=fired,
                       tokens={f"token-{name}"}, seconds=1.0,
                       check={"invariants": {"stranded": {"holds": not broken}}})


def test_search_json_and_the_report_record_budgets_seeds_and_coverage(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Search, "trial", fake_trial)
    s = Settings(scheduler="yunikorn", control=UNFAULTED, budget=3600, seed=5, kinds=("abort", "delay", "crashPoint"),
                 out=tmp_path, state_dir=tmp_path, profiles_dir=tmp_path, pods=40, shrink_budget=30, replays=2,
                 max_trials=12, canary_every=4)
    out: Outcome = Search(s, lambda _: None).run()
    report = write(out, ["search"]).read_text()
    doc = json.loads((tmp_path / "search.json").read_text())
    assert doc["budgets"] == {"searchSeconds": 3600, "maxTrials": 12, "shrinkSecondsPerFinding": 30,
                              "shrinkSecondsTotal": 1800.0, "replays": 2,
                              "canaryEvery": 4}
    cov = doc["coverage"]
    assert set(cov["kinds"]) == {"abort", "delay", "crashPoint"}
    drawn = sum(1 for t in out.trials for r in t.genome.rules if fault_kind(r) == "abort")
    assert cov["kinds"]["abort"]["trials"] == sum(
        1 for t in out.trials if any(fault_kind(r) == "abort" for r in t.genome.rules)) and drawn
    assert cov["noveltyTokens"] == len(out.trials) == cov["novelTrials"] == out.tokens  # one new token each
    assert sum(cov["shapes"].values()) == len(out.trials) == 9  # 12 less the canaries c3, c7, c11
    assert "## What was searched" in report and "search seed 5" in report and "at most 12 search trials" in report
    assert ("30 s of shrinking per distinct finding (no shrink starts after 1800 s of the shrink phase) and 2 "
            "replays") in report and "every 4 trials" in report
    assert "| abort |" in report and "| crashPoint |" in report


def test_kinds_all_is_every_kind_the_grammar_knows() -> None:
    def asked(kinds: str | None, exclude: list[str] | None = None) -> tuple[str, ...]:
        return _kinds(argparse.Namespace(kinds=kinds, exclude_kinds=exclude))

    assert asked("all") == KNOWN_KINDS and set(VIEW_KINDS) <= set(asked("all"))
    assert asked(None) == ALL_KINDS  # the default leaves the view kinds out
    assert asked("all", ["outage"]) == tuple(k for k in KNOWN_KINDS if k != "outage")
    assert asked("abort,all") == ("abort", *(k for k in KNOWN_KINDS if k != "abort"))


def test_a_rule_editing_watch_events_fired_only_when_it_edited_one() -> None:
    from kube_fault_proxy.rig.search.trial import fired_rules

    records = [{"event": "inject", "rule": "r1-duplicateevents-pod-watch", "fault": "duplicateEvents"},
               {"event": "inject", "rule": "r2-delayevents-node-watch", "fault": "delayEvents"},
               {"event": "watch-event", "rule": "r2-delayevents-node-watch", "fault": "delayEvents", "action": "delayed"},
               {"event": "inject", "rule": "r3-stalelist-pod-watch", "fault": "staleList", "servedAs": "watchlist"},
               {"event": "stale-skipped", "rule": "r4-stalelist-node-watch", "fault": "staleList"}]
    assert fired_rules(records) == {"r2-delayevents-node-watch", "r3-stalelist-pod-watch"}
