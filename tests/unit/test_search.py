"""The fault search's pure parts: the grammar, seeded trials, shrinking, ddmin, and its files."""

from __future__ import annotations

import argparse
import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_fault_proxy.cli.main import main
from kube_fault_proxy.proxy.profiles.loader import load_text
from kube_fault_proxy.rig.invariants.catalogue import INVARIANTS
from kube_fault_proxy.rig.runs.scenario import load_scenario
from kube_fault_proxy.rig.search.engine import Search
from kube_fault_proxy.rig.search.genome import Genome, fault_kind, simplicity, valid
from kube_fault_proxy.rig.search.grammar import (
    ALL_KINDS,
    VIEW_KINDS,
    WATCH_KINDS,
    mutate,
    random_genome,
    trial_rng,
)
from kube_fault_proxy.rig.search.hit import Hit
from kube_fault_proxy.rig.search.kinds import SPECS
from kube_fault_proxy.rig.search.outcome import Outcome, Settings
from kube_fault_proxy.rig.search.output import INVARIANT_NAMES, WITNESS_ORDER, scenario_doc, write
from kube_fault_proxy.rig.search.shrink import Shrunk, candidates, ddmin, shrink
from kube_fault_proxy.rig.search.trial import TrialResult, set_schedulable
from kube_fault_proxy.rig.search.waist import BINDING


def genomes(seed: int, n: int, kinds: tuple[str, ...] = ALL_KINDS) -> list[Genome]:
    return [random_genome(trial_rng(seed, i), kinds, 100) for i in range(n)]


def settings(tmp_path: Path, seed: int = 1, kinds: tuple[str, ...] = ALL_KINDS) -> Settings:
    return Settings(scheduler="yunikorn", control="kube-scheduler", budget=60, seed=seed, kinds=kinds,
                    out=tmp_path, state_dir=tmp_path, profiles_dir=tmp_path)


def test_every_generated_profile_passes_the_strict_loader() -> None:
    for g in genomes(1, 400):
        assert 1 <= len(g.rules) <= 4
        profile = load_text(g.to_yaml("search-t"), "<test>")  # rendered to YAML and loaded back
        assert [r.name for r in profile.spec.rules] == [r["name"] for r in g.rules]
        for rule in g.rules:  # bounded: every fault is over before the check
            when = rule.get("when") or {}
            assert "maxInjections" in when or "for" in when, rule


@pytest.mark.parametrize("kind", ALL_KINDS)
def test_each_kind_alone_yields_valid_profiles_of_that_kind_only(kind: str) -> None:
    for g in genomes(7, 60, (kind,)):
        assert valid(g)
        assert {fault_kind(r) for r in g.rules} == {kind}
        if kind in WATCH_KINDS:  # watch faults go to watches
            assert all(r["match"]["verbs"] == ["watch"] for r in g.rules)


def test_mutations_stay_valid_and_within_the_kinds() -> None:
    kinds = tuple(k for k in ALL_KINDS if k != "outage")
    corpus = genomes(3, 20, kinds)
    rng = random.Random(5)
    for _ in range(500):
        g = mutate(rng, rng.choice(corpus), kinds, rng.choice(corpus))
        assert valid(g), g.canonical()
        assert 1 <= len(g.rules) <= 4
        assert all(fault_kind(r) in kinds for r in g.rules)
        corpus.append(g)


def test_the_same_seed_gives_the_same_trials(tmp_path: Path) -> None:
    assert [g.canonical() for g in genomes(42, 30)] == [g.canonical() for g in genomes(42, 30)]
    assert [g.canonical() for g in genomes(42, 30)] != [g.canonical() for g in genomes(43, 30)]
    # With a corpus: trial i is a function of (seed, i) and the corpus built so far.
    a, b = Search(settings(tmp_path, 9), print), Search(settings(tmp_path, 9), print)
    corpus = genomes(1, 5)
    assert [a.genome(i, corpus).canonical() for i in range(40)] == [b.genome(i, corpus).canonical()
                                                                   for i in range(40)]
    assert {a.genome(i, corpus).origin for i in range(40)} > {"random"}  # some trials mutate the corpus


def test_counts_in_triggers_are_quantiles_of_the_load() -> None:
    counts = {r["when"]["trigger"]["count"] for g in genomes(2, 300) for r in g.rules if "trigger" in r["when"]}
    assert counts <= {1, 5, 20, 50, 90}
    assert len(counts) >= 4


def test_every_shrink_candidate_is_valid() -> None:
    for g in genomes(11, 200):
        for what, cand in candidates(g):
            assert valid(cand), (what, cand.canonical())


def test_every_accepted_shrink_step_keeps_validity_and_gets_simpler() -> None:
    g = max(genomes(5, 50), key=lambda g: simplicity(g))  # the most complex of them
    accepted: list[Genome] = []

    def always_fails(cand: Genome) -> tuple[bool, list[list[str]]]:
        assert valid(cand)
        accepted.append(cand)
        return True, [["I3"]]

    result = shrink(g, always_fails, budget=60)
    chain = [g, *[a for a, st in zip(accepted, result.steps, strict=True) if st.accepted]]
    assert all(valid(x) for x in chain)
    # ddmin keeps one rule when every subset fails; every later step is strictly simpler
    later = chain[1:]
    assert all(simplicity(b) < simplicity(a) for a, b in itertools.pairwise(later))
    assert len(result.genome.rules) == 1 and result.genome.action is None and result.genome.pods == 20
    assert result.genome.nodes == 1  # node counts shrink too, once the profile is minimal


def test_node_shrinking_stops_at_the_smallest_node_count_that_still_fails() -> None:
    """The oracle: the invariant breaks only while at least 2 nodes are schedulable."""
    start = Genome(rules=({"name": "r1-abort-binding", "match": dict(BINDING), "when": {"maxInjections": 1},
                           "fault": {"abort": {"status": 500}}},), pods=20, seed=2)

    def oracle(cand: Genome) -> tuple[bool, list[list[str]]]:
        hit = cand.nodes is None or cand.nodes >= 2
        return hit, [["stranded"] if hit else []]

    result = shrink(start, oracle, budget=60)
    assert result.genome.nodes == 2 and result.genome.rules == start.rules
    tried = [st.what for st in result.steps]
    assert "nodes all -> 5" in tried and "nodes 2 -> 1" in tried
    assert Genome(rules=start.rules, pods=20, seed=2).digest() == start.digest()  # unset: digest as before
    assert '"nodes":2' in result.genome.canonical()


def test_ddmin_reaches_the_known_minimum() -> None:
    calls: list[list[int]] = []

    def fails(subset: list[int]) -> bool:
        calls.append(subset)
        return {3, 11} <= set(subset)

    assert ddmin(list(range(16)), fails) == [3, 11]
    assert ddmin([1, 2, 3, 4], lambda s: 4 in s) == [4]
    assert ddmin([1, 2, 3, 4], lambda s: {1, 2, 3, 4} <= set(s)) == [1, 2, 3, 4]
    assert len(calls) < 16 * 16  # O(n²) at worst


def test_shrinking_on_a_synthetic_oracle_finds_the_one_rule_and_its_minimal_form() -> None:
    """The oracle: the invariant breaks iff some rule aborts Bindings at least once."""
    noise = [r for g in genomes(13, 30, ("delay", "expire", "throttle")) for r in g.rules][:3]
    culprit = {"name": "r9-abort-binding", "match": {k: list(v) for k, v in BINDING.items()}, "probability": 0.5,
               "when": {"trigger": {"match": dict(BINDING), "count": 50, "answered": True}, "every": 3,
                        "maxInjections": 20, "perObjectMax": 2},
               "fault": {"abort": {"status": 503, "retryAfterSeconds": 5}}}
    start = Genome(rules=(noise[0], culprit, noise[1], noise[2]), pods=100, action="touchPods", seed=3)
    assert valid(start)

    def oracle(cand: Genome) -> tuple[bool, list[list[str]]]:
        hit = any(fault_kind(r) == "abort" and r.get("match", {}).get("subresources") == ["binding"]
                  for r in cand.rules)
        return hit, [["I3"] if hit else []]

    result = shrink(start, oracle, budget=60)
    (rule,) = result.genome.rules
    assert rule["fault"] == {"abort": {"status": 503}} or rule["fault"] == {"abort": {"status": 500}}
    assert rule["when"] == {"maxInjections": 1} and "probability" not in rule
    assert result.genome.action is None and result.genome.pods == 20
    assert sum(1 for st in result.steps if st.accepted) >= 5


def test_the_replay_scenario_and_the_minimal_profile_load(tmp_path: Path) -> None:
    g = Genome(rules=({"name": "r1-abort-binding", "match": dict(BINDING), "when": {"maxInjections": 1},
                       "fault": {"abort": {"status": 500}}},), pods=20, action="touchPods", seed=4)
    (tmp_path / "minimal-profile.yaml").write_text(g.to_yaml("search-minimal"))
    path = tmp_path / "replay-scenario.yaml"
    path.write_text(yaml.safe_dump(scenario_doc(g, "yunikorn", "kube-scheduler", ["I3", "stranded"], 20)))
    scenario = load_scenario(path)
    assert scenario.spec.timeline[0].activate == "search-minimal"
    assert any(s.touchPods for s in scenario.spec.timeline)
    assert scenario.spec.expect["kube-scheduler"].verdict == "clean"
    assert main(["profiles", "validate", str(tmp_path / "minimal-profile.yaml")]) == 0


def test_the_report_draws_the_reproducing_replay(tmp_path: Path) -> None:
    g = Genome(rules=({"name": "r1-abort-binding", "match": dict(BINDING), "when": {"maxInjections": 2},
                       "fault": {"abort": {"status": 403}}},), pods=20, seed=4)
    # Two of 20 pods never bound: what the replay's samples (one per poll) recorded.
    samples = [{"t": float(t), "pods": 20, "bound": b, "pending": 20 - b, "bindsSucceeded": b, "bindsFailed": f}
               for t, b, f in ((0, 0, 0), (1, 12, 2), (2, 18, 2), (3, 18, 2), (4, 18, 2))]
    check = {"verdict": "violations", "invariants": {"stranded": {"holds": False, "violations": 2}},
             "violations": [{"invariant": "stranded", "objects": ["s-x/load-1"], "message": "Pending, no node"}]}
    witness = TrialResult("replay-1", "yunikorn", g, broken=["stranded"], check=check, samples=samples,
                          events=[{"event": "activate", "t": 0.0, "profile": "search-minimal"},
                                  {"event": "deactivate", "t": 3.1}],
                          history={"load-1": ["create pods/binding -> abort (403)"]})
    out = Outcome(settings(tmp_path), confirmed=Hit(0, g, ["stranded"], ["stranded"], [], "confirmed"),
                  target=["stranded"], shrunk=Shrunk(g, []), minimal_control=[], replays=[["stranded"]] * 5,
                  witness=witness)
    report = write(out, ["search"]).read_text()
    svg = (tmp_path / "timeline.svg").read_text()
    assert svg.startswith("<svg") and "search minimal case" in svg and "(stranded)" in svg
    assert svg.count("<polyline") == 2  # bound and pending, over the five samples
    assert "![The first reproducing replay" in report and "(timeline.svg)" in report
    assert "**load-1**: stranded" in report and "create pods/binding -> abort (403)" in report


def test_no_picture_without_a_reproducing_replay(tmp_path: Path) -> None:
    out = Outcome(settings(tmp_path))
    report = write(out, ["search"]).read_text()
    assert "No confirmed violation" in report and not (tmp_path / "timeline.svg").exists()


@pytest.mark.parametrize("argv", [
    ["search"],
    ["search", "--scheduler", "yunikorn", "--budget", "1m"],
    ["search", "--scheduler", "yunikorn", "--budget", "1m", "-o", "x", "--kinds", "abort,nonsense"],
    ["search", "--scheduler", "yunikorn", "--budget", "60", "-o", "x"],
    ["search", "--scheduler", "yunikorn", "--control", "yunikorn", "--budget", "1m", "-o", "x"],
    ["search", "--scheduler", "yunikorn", "--budget", "1m", "-o", "x", "--kinds", "abort", "--exclude-kinds", "abort"],
    ["search", "--scheduler", "kube-scheduler", "--budget", "1m", "-o", "x", "--yunikorn-patch", "fix.patch"],
])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "kube-fault-proxy search:" in capsys.readouterr().err


def test_a_patch_that_cannot_be_read_is_a_usage_error_naming_it(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-such-fix.patch"
    assert main(["search", "--scheduler", "yunikorn", "--budget", "1m", "-o", str(tmp_path / "out"),
                 "--yunikorn-patch", str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_replay_of_a_directory_that_is_not_a_search_exits_2(tmp_path: Path) -> None:
    assert main(["search", "replay", str(tmp_path)]) == 2


@pytest.mark.parametrize("size", [["--pods", "0"], ["--nodes", "0"]])
def test_replay_at_a_size_below_one_exits_2_before_starting_anything(tmp_path: Path, size: list[str],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    minimal = {"rules": [{"name": "r1-abort-binding", "match": dict(BINDING), "when": {"maxInjections": 1},
                          "fault": {"abort": {"status": 500}}}], "pods": 20, "action": None, "seed": 1, "nodes": 2}
    (tmp_path / "search.json").write_text(json.dumps({"minimal": minimal, "target": ["stranded"],
                                                      "scheduler": "yunikorn", "nodes": 20}))
    state = tmp_path / "state"
    assert main(["search", "replay", str(tmp_path), *size, "--state-dir", str(state)]) == 2
    assert "at least 1" in capsys.readouterr().err and not state.exists()


class _Nodes:
    """The two calls set_schedulable makes, on plain node dicts."""

    def __init__(self, n: int) -> None:
        self.nodes = {f"kfp-node-{i:04d}": {"metadata": {"name": f"kfp-node-{i:04d}"}, "spec": {}}
                      for i in range(n, 0, -1)}
        self.patches: list[str] = []

    def list(self, kind: object) -> list[dict[str, Any]]:
        return list(self.nodes.values())

    def patch(self, kind: object, name: str, body: dict[str, Any], patch_type: object) -> None:
        self.patches.append(name)
        spec = self.nodes[name]["spec"]
        if body["spec"]["unschedulable"] is None:
            spec.pop("unschedulable", None)
        else:
            spec["unschedulable"] = body["spec"]["unschedulable"]


def test_set_schedulable_cordons_all_but_the_first_nodes_by_name_and_undoes_it() -> None:
    api = _Nodes(5)
    assert set_schedulable(api, 2) == 2
    cordoned = sorted(n for n, node in api.nodes.items() if node["spec"].get("unschedulable"))
    assert cordoned == ["kfp-node-0003", "kfp-node-0004", "kfp-node-0005"]
    api.patches.clear()
    assert set_schedulable(api, 2) == 2 and api.patches == []  # nothing to change: no write
    assert set_schedulable(api, None) == 5
    assert not any(node["spec"] for node in api.nodes.values()) and len(api.patches) == 3


def test_set_schedulable_keeps_when_it_knew_each_node_cordoned() -> None:
    api, cordoned = _Nodes(5), dict[str, float]()
    set_schedulable(api, 3, cordoned)
    first = dict(cordoned)
    assert sorted(first) == ["kfp-node-0004", "kfp-node-0005"]
    set_schedulable(api, 2, cordoned)  # one more; the earlier cordons keep their times
    assert sorted(cordoned) == ["kfp-node-0003", "kfp-node-0004", "kfp-node-0005"]
    assert {n: cordoned[n] for n in first} == first
    set_schedulable(api, None, cordoned)
    assert cordoned == {}


def test_the_search_knows_every_invariant() -> None:
    assert sorted(INVARIANT_NAMES) == sorted(WITNESS_ORDER) == sorted(INVARIANTS)
    assert WITNESS_ORDER[0] == "no-overcommit" and WITNESS_ORDER.index("I2") < WITNESS_ORDER.index("I1")
    g = Genome(rules=(), seed=1, pods=10)
    doc = scenario_doc(g, "kube-scheduler", None, ["no-overcommit", "stranded"], 5)
    assert doc["spec"]["expect"]["kube-scheduler"]["invariants"] == ["no-overcommit", "stranded"]


PERTURBED_VIEWS = tuple(k for k in VIEW_KINDS if SPECS[k].search_group == "view")  # the kinds named, the views


@pytest.mark.parametrize("kind", [k for k in VIEW_KINDS if k not in PERTURBED_VIEWS])
def test_the_other_kinds_drawn_only_when_named_are_drawn_valid_and_shrink_valid(kind: str) -> None:
    assert kind not in ALL_KINDS, "not in the default kinds: a seeded search draws the trials it drew before"
    drawn = genomes(13, 30, (kind,))
    assert drawn
    for g in drawn:
        assert valid(g) and {fault_kind(r) for r in g.rules} == {kind}
        for what, cand in candidates(g):
            assert valid(cand), (what, cand.canonical())
    from kube_fault_proxy.cli.search import _kinds

    assert _kinds(argparse.Namespace(kinds=kind, exclude_kinds=None)) == (kind,), "--kinds names it"


@pytest.mark.parametrize("kind", PERTURBED_VIEWS)
def test_the_view_kinds_are_searched_when_named_bounded_and_shrink_to_a_shorter_lag(kind: str) -> None:
    assert kind not in ALL_KINDS, "not in the default kinds: a seeded search draws the trials it drew before"
    drawn = genomes(13, 60, (kind,))
    for g in drawn:
        assert valid(g) and {fault_kind(r) for r in g.rules} == {kind}
        for rule in g.rules:
            when = rule.get("when") or {}
            assert "maxInjections" in when or "for" in when, rule
            assert rule["match"]["verbs"] in {"staleList": [["watch"]], "coalesceEvents": [["watch"]],
                                              "crashPoint": [["create"], ["patch", "update"]],
                                              "delayEvents": [["watch"]], "holdEvents": [["watch"]], "twoViews": [["watch"]],
                                              "failThenCommit": [["create"], ["patch", "update"]],
                                              "watchList": [["watch"]]}[kind]
        for what, cand in candidates(g):
            assert valid(cand), (what, cand.canonical())
    settings_of = {key for g in drawn for r in g.rules for key in r["fault"][kind]}
    lag = next(k for k in ("lagSeconds", "lagWrites", "windowSeconds", "holdSeconds", "seconds",
                           "commitAfterSeconds", "maxSeconds") if k in settings_of)
    g = next(g for g in drawn if lag in g.rules[0]["fault"][kind] and g.rules[0]["fault"][kind][lag] > 1)
    shorter = [cand.rules[0]["fault"][kind][lag] for _, cand in candidates(g)
               if cand.rules[0]["fault"].get(kind, {}).get(lag, 0) < g.rules[0]["fault"][kind][lag]]
    assert shorter and all(x > 0 for x in shorter), "a weaker form: a shorter lag or window"
    from kube_fault_proxy.cli.search import _kinds

    assert _kinds(argparse.Namespace(kinds=kind, exclude_kinds=None)) == (kind,), "--kinds names it"


def test_a_crash_point_is_drawn_after_a_committed_bind_once_and_shrinks_to_a_later_point() -> None:
    drawn = genomes(13, 60, ("crashPoint",))
    pods = drawn[0].pods
    for g in drawn:
        for rule in g.rules:
            when = rule["when"]
            assert when["maxInjections"] == 1 and "probability" not in rule
            assert "answered" not in when["trigger"] and when["trigger"]["match"]["subresources"] == ["binding"]
            assert 1 <= when["trigger"]["count"] <= pods
    g = next(g for g in drawn if len(g.rules) == 1 and 2 <= g.rules[0]["when"]["trigger"]["count"] <= g.pods // 2)
    count = g.rules[0]["when"]["trigger"]["count"]
    [later] = [c for w, c in candidates(g) if "later crash point" in w]
    assert later.rules[0]["when"]["trigger"]["count"] == count * 2
    assert simplicity(later) < simplicity(g), "a later point is a weaker form: shrink takes it"
    earlier = [c for _, c in candidates(g) if c.rules and "trigger" in c.rules[0]["when"]
               and c.rules[0]["when"]["trigger"]["count"] < count]
    assert earlier and all(simplicity(c) > simplicity(g) for c in earlier), "an earlier point is no simpler"
    last = g.with_(rules=({**g.rules[0], "when": {**g.rules[0]["when"],
                                                  "trigger": {**g.rules[0]["when"]["trigger"], "count": g.pods}}},))
    assert not [w for w, _ in candidates(last) if "later crash point" in w], "never past the load's last pod"


def test_replay_of_a_kube_scheduler_finding_waits_as_the_search_s_own_replays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`search replay` gives kube-scheduler the patient tier (it gave every scheduler 8 s of quiet, which counts a
    pod kube-scheduler would still retry as stranded), YuniKorn the confirmation tier."""
    import contextlib

    from kube_fault_proxy.cli import search as cli
    from kube_fault_proxy.rig.search.trial import CONFIRM, PATIENT, Rig

    minimal = {"rules": [{"name": "r1-abort-binding", "match": dict(BINDING), "when": {"maxInjections": 1},
                          "fault": {"abort": {"status": 500}}}], "pods": 20, "action": None, "seed": 1, "nodes": 2}
    tiers: list[object] = []

    @contextlib.contextmanager
    def running(*args: object, devices: bool = False, gangs: bool = False,
                kube_scheduler_patch: Path | None = None) -> Any:
        assert not devices and not gangs  # a roomy finding needs no DRA controller, no gang API
        assert kube_scheduler_patch is None  # a search.json without kubeSchedulerPatch: the released build
        yield argparse.Namespace(build="yunikorn v1.9.0+a-fix-0123456789ab")  # the build the rig runs

    def trial(rig: object, genome: Genome, name: str, tier: object, note: object) -> TrialResult:
        tiers.append(tier)
        return TrialResult(name, "x", genome, broken=["stranded"])

    monkeypatch.setattr(Rig, "running", running)
    monkeypatch.setattr(cli, "run_trial", trial)
    for scheduler, tier in (("kube-scheduler", PATIENT), ("yunikorn", CONFIRM)):
        (tmp_path / "search.json").write_text(json.dumps({"minimal": minimal, "target": ["stranded"],
                                                          "scheduler": scheduler, "nodes": 20}))
        tiers.clear()
        assert main(["search", "replay", str(tmp_path), "--times", "2", "--state-dir", str(tmp_path / "s")]) == 1
        assert tiers == [tier, tier]
        # the build replayed is the rig's, not the `build` the search recorded
        assert "2/2 replays broke stranded on yunikorn v1.9.0+a-fix-0123456789ab" in capsys.readouterr().out


WATCH_DRAWN = ("duplicateEvents", "dropEvents", "delayEvents", "holdEvents", "staleList", "coalesceEvents", "twoViews")


@pytest.mark.parametrize("kind", WATCH_DRAWN)
def test_a_drawn_watch_rule_comes_with_what_reopens_the_schedulers_watches(kind: str) -> None:
    """The profile goes on after the scheduler opened its watches: a watch rule is drawn bounded only, with a
    reopen (a dropped connection or a restart) and, for staleList, a relist (a reset, a restart, or an outage and
    an expire of the resumed watch); an expire gets an outage (after a reset or a restart nothing resumes)."""
    from kube_fault_proxy.rig.search import precheck

    kinds = (kind, "resetUpstream", "outage", "expire", "crashPoint")
    drawn = genomes(21, 80, kinds) + [mutate(random.Random(i), g, kinds, g) for i, g in enumerate(genomes(22, 40, kinds))]
    with_kind = [g for g in drawn if any(fault_kind(r) == kind for r in g.rules)]
    assert len(with_kind) >= 20
    passed = 0
    for g in with_kind:
        assert valid(g) and len(g.rules) <= 4
        fired = {fault_kind(r) for r in g.rules}
        assert fired & {"resetUpstream", "outage", "crashPoint"}, g.canonical()
        if kind == "staleList" and any(fault_kind(r) == kind and r["match"]["verbs"] == ["watch"] for r in g.rules):
            assert fired & {"crashPoint", "resetUpstream"} or {"outage", "expire"} <= fired, g.canonical()
        for r in g.rules:
            if r.get("match", {}).get("verbs") == ["watch"]:
                assert set(r["when"]) == {"maxInjections"} and "probability" not in r, r
        takes = [(r["match"]["resources"][0], fault_kind(r) in ("staleList", "expire") and fault_kind(r))
                 for r in g.rules if r.get("match", {}).get("verbs") == ["watch"]]
        assert len(takes) == len(set(takes)), f"two rules for the same watch requests: {g.canonical()}"
        for res in {t[0] for t in takes}:  # a staleList takes the relist a restart or an expire brings: nothing after
            assert not ((res, "staleList") in takes and (res, False) in takes), g.canonical()
        if any(fault_kind(r) == "expire" for r in g.rules):  # it acts on a resumed watch: after an outage
            assert "outage" in fired, g.canonical()
        passed += precheck.can_inject(g, scheduler="kube-scheduler") and precheck.can_inject(g, scheduler="yunikorn")
    assert passed >= 0.9 * len(with_kind), "the pre-check passes what the grammar draws (a rule on a pod write aside)"


def test_hold_events_waits_for_the_other_resource_s_watch() -> None:
    for g in genomes(23, 60, ("holdEvents", "resetUpstream")):
        for r in g.rules:
            if fault_kind(r) == "holdEvents":
                until = r["fault"]["holdEvents"].get("untilEvent")
                watched = r["match"]["resources"][0]
                assert until is None or until["resource"] == {"nodes": "pods", "pods": "nodes"}[watched]
                assert 0 < r["fault"]["holdEvents"]["maxSeconds"] <= 5
