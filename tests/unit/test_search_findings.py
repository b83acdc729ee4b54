"""The search's findings: grouped by signature, canaries never findings, the pre-check and the
injected-nothing share, and what the report says (engine, findings, precheck and output, on fake trials)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.rig.search import precheck
from kube_fault_proxy.rig.search.engine import Search
from kube_fault_proxy.rig.search.findings import Finding, add_hit, contained_in, merge, shrink_order, signature
from kube_fault_proxy.rig.search.genome import Genome, fault_kind
from kube_fault_proxy.rig.search.grammar import ALL_KINDS
from kube_fault_proxy.rig.search.hit import Hit
from kube_fault_proxy.rig.search.outcome import UNFAULTED, Outcome, Settings
from kube_fault_proxy.rig.search.output import control_text, write
from kube_fault_proxy.rig.search.shrink import Shrunk
from kube_fault_proxy.rig.search.trial import SEARCH, Tier, TrialResult
from kube_fault_proxy.rig.search.waist import BINDING


def rule(kind: str, match: dict[str, Any] | None = None, name: str | None = None, **when: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name or f"r1-{kind.lower()}-binding", "match": dict(match or BINDING),
                           "when": {"maxInjections": 1, **when}, "fault": {kind: {"status": 500} if kind == "abort"
                                                                            else {}}}
    return out


WATCH = {"verbs": ["watch"], "resources": ["pods"]}


def settings(tmp_path: Path, control: str | None = UNFAULTED, **more: Any) -> Settings:
    return Settings(scheduler="kube-scheduler", control=control, budget=3600, seed=3, kinds=("abort", "reset", "delay"),
                    out=tmp_path, state_dir=tmp_path, profiles_dir=tmp_path, pods=40, shrink_budget=30, replays=2,
                    **more)


# --- grouping by signature


def hit(trial: int, rules: tuple[dict[str, Any], ...], broken: list[str]) -> Hit:
    return Hit(trial, Genome(rules=rules), broken, list(broken), [], "confirmed")


def test_hits_of_one_signature_are_one_finding_and_other_kinds_or_invariants_another() -> None:
    findings: list[Finding] = []
    add_hit(findings, hit(1, (rule("abort"),), ["stranded"]))
    add_hit(findings, hit(4, (rule("abort", maxInjections=5),), ["stranded"]))  # same kinds and match
    add_hit(findings, hit(6, (rule("reset"),), ["stranded"]))  # another kind
    add_hit(findings, hit(8, (rule("abort"),), ["no-overcommit", "stranded"]))  # more broken
    assert [[h.trial for h in f.hits] for f in findings] == [[1, 4], [6], [8]]
    assert findings[0].signature == ("stranded", "abort on binding")
    assert signature(["stranded"], Genome(rules=(rule("abort", WATCH),))) == ("stranded", "abort on pod-watch")


def test_findings_whose_minimal_cases_agree_are_merged_after_shrinking() -> None:
    findings: list[Finding] = []
    add_hit(findings, hit(1, (rule("abort"),), ["stranded"]))
    two = add_hit(findings, hit(3, (rule("abort"), rule("delay", name="r2-delay-binding")), ["stranded"]))
    two.shrunk = Shrunk(Genome(rules=(rule("abort"),)), [])  # the delay was not needed
    merged = merge(findings)
    assert len(merged) == 1 and [h.trial for h in merged[0].hits] == [1, 3]


def test_the_first_finding_of_each_set_of_broken_invariants_is_shrunk_first() -> None:
    findings: list[Finding] = []
    for trial, kinds, broken in [(1, ("abort",), ["stranded"]), (2, ("delay",), ["stranded"]),
                                 (3, ("reset",), ["I1"]), (4, ("abort", "reset"), ["stranded"])]:
        add_hit(findings, hit(trial, tuple(rule(k, name=f"r{i}-{k.lower()}-binding") for i, k in enumerate(kinds)),
                              broken))
    assert [f.first.trial for f in shrink_order(findings)] == [1, 3, 2, 4]


def test_a_drawn_profile_that_contains_an_earlier_minimal_case_is_filed_under_it() -> None:
    findings: list[Finding] = []
    one = add_hit(findings, hit(1, (rule("abort"), rule("reset", WATCH, "r2-reset-pod-watch")), ["stranded"]))
    one.shrunk = Shrunk(Genome(rules=(rule("abort"),)), [])
    bigger = add_hit(findings, hit(5, (rule("abort"), rule("delay", name="r2-delay-binding")), ["stranded"]))
    other = add_hit(findings, hit(6, (rule("delay"),), ["stranded"]))  # no abort on Bindings: its own bug
    more = add_hit(findings, hit(7, (rule("abort"), rule("delay", name="r2-delay-binding")), ["I1", "stranded"]))
    assert contained_in(bigger, [one]) is one
    assert contained_in(other, [one]) is None and contained_in(more, [one]) is None  # other cause, other invariants
    assert contained_in(bigger, [Finding(one.signature, one.target, one.hits)]) is None  # not shrunk: no minimal


def test_the_shrink_phase_is_bounded_and_what_it_did_not_reach_is_reported_unshrunk(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Search, "trial", fake_trial)
    out = Search(settings(tmp_path, max_trials=30, shrink_total=0.0), lambda _: None).run()
    assert out.findings and all(f.shrunk is None and f.replays == [] for f in out.findings)
    report = write(out, ["search"]).read_text()
    assert f"not shrunk (the total shrink budget spent): {len(out.findings)}" in report
    sub = tmp_path / "findings" / out.findings[0].slug(1)
    text = (sub / "report.md").read_text()
    assert "## Confirmed, not shrunk" in text and "rules:" in text and not (sub / "minimal-profile.yaml").exists()
    assert json.loads((tmp_path / "search.json").read_text())["findings"][0]["shrunk"] is False


def test_groups_of_one_cause_are_shrunk_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shrinks: list[int] = []
    original = Search.minimise

    def counting(self: Search, found: Finding) -> None:
        shrinks.append(found.first.trial)
        original(self, found)

    monkeypatch.setattr(Search, "trial", fake_trial)
    monkeypatch.setattr(Search, "minimise", counting)
    out = Search(settings(tmp_path, max_trials=30), lambda _: None).run()
    groups = len(out.findings) + sum(1 for f in out.findings for h in f.hits[1:] if h.genome != f.first.genome)
    assert len(shrinks) == len(out.findings) < groups, "contained groups are filed without a shrink of their own"
    assert sum(f.contained for f in out.findings) >= 1
    assert all(f.shrunk is not None and f.rate() == "2/2" for f in out.findings)


# --- the engine on fake trials: canaries, every distinct bug, nothing injected


def fake_trial(self: Search, scheduler: str, genome: Genome, name: str, tier: Tier = SEARCH) -> TrialResult:
    """abort breaks stranded, reset breaks no-overcommit (both only when injected); canary c9 breaks stranded."""
    kinds = {fault_kind(r) for r in genome.rules}
    if not genome.rules:
        return TrialResult(name, scheduler, genome, broken=["stranded"] if name == "c9" else [], seconds=1.0)
    silent = genome.seed % 7 == 0  # a few trials whose faults never fire
    broken = [] if silent else ["stranded"] * ("abort" in kinds) + ["no-overcommit"] * ("reset" in kinds)
    return TrialResult(name, scheduler, genome, broken=sorted(broken), injections=0 if silent else 3,
                       fired=set() if silent else {r["name"] for r in genome.rules}, seconds=1.0)


@pytest.fixture
def outcome(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Outcome:
    monkeypatch.setattr(Search, "trial", fake_trial)
    return Search(settings(tmp_path, max_trials=30), lambda _: None).run()


def test_the_search_keeps_going_and_reports_every_distinct_bug(outcome: Outcome) -> None:
    targets = sorted(",".join(f.target) for f in outcome.findings)
    assert "stranded" in targets and "no-overcommit" in targets
    assert len({f.signature for f in outcome.findings}) == len(outcome.findings)
    for f in outcome.findings:  # each shrunk to one rule per invariant it breaks, and replayed
        assert len(f.minimal.rules) == len(f.target) and f.rate() == "2/2" and f.minimal_control == []
    assert outcome.confirmed is outcome.findings[0].first and outcome.target == outcome.findings[0].target


def test_canaries_run_every_tenth_trial_and_a_broken_one_is_never_a_finding(outcome: Outcome) -> None:
    assert [c.name for c in outcome.canaries] == ["c9", "c19", "c29"]
    assert all(not c.genome.rules for c in outcome.canaries)
    assert [c.name for c in outcome.broken_canaries()] == ["c9"]
    assert all(9 not in [h.trial for h in f.hits] for f in outcome.findings)
    assert len(outcome.trials) == 27


def test_a_trial_that_injected_nothing_is_counted_and_never_clean_evidence(outcome: Outcome) -> None:
    nothing = [t for t in outcome.trials if t.injections == 0]
    assert outcome.injected_nothing == len(nothing)
    assert outcome.injected_nothing_share() == pytest.approx(len(nothing) / len(outcome.trials))
    o = Outcome(outcome.settings, trials=[TrialResult("a", "k", Genome(rules=()), injections=0),
                                          TrialResult("b", "k", Genome(rules=()), injections=2)])
    assert o.injected_nothing == 1 and o.injected_nothing_share() == 0.5


def test_a_hit_with_nothing_injected_is_the_rigs_not_a_finding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def breaks_silently(self: Search, scheduler: str, genome: Genome, name: str, tier: Tier = SEARCH) -> TrialResult:
        return TrialResult(name, scheduler, genome, broken=["stranded"], injections=0, seconds=1.0)

    monkeypatch.setattr(Search, "trial", breaks_silently)
    out = Search(settings(tmp_path, max_trials=5), lambda _: None).run()
    assert out.findings == [] and {h.verdict for h in out.hits} == {"no-injection"}


def test_the_report_indexes_every_finding_with_its_rate_and_directory(outcome: Outcome) -> None:
    report = write(outcome, ["search"]).read_text()
    d = outcome.settings.out
    assert f"## Findings: {len(outcome.findings)} distinct" in report
    for i, f in enumerate(outcome.findings, 1):
        sub = d / "findings" / f.slug(i)
        assert (sub / "report.md").exists() and (sub / "minimal-profile.yaml").exists()
        assert f"findings/{f.slug(i)}/report.md" in report
        assert json.loads((sub / "search.json").read_text())["target"] == f.target
    assert "injected nothing" in report and "3 fault-free canaries" in report and "c9" in report
    doc = json.loads((d / "search.json").read_text())
    assert len(doc["findings"]) == len(outcome.findings) and doc["injectedNothing"] == outcome.injected_nothing
    assert "control (the same workload without the profile) clean" in report


def test_a_report_says_no_control_run_when_none_ran(tmp_path: Path) -> None:
    g = Genome(rules=(rule("abort"),), pods=20)
    out = Outcome(settings(tmp_path, control=None), confirmed=Hit(0, g, ["stranded"], ["stranded"], None, "confirmed"),
                  target=["stranded"], shrunk=Shrunk(g, []), replays=[["stranded"]])
    report = write(out, ["search"]).read_text()
    assert "no control run" in report and "control (none)" not in report
    assert control_text("kube-scheduler", ["stranded"]) == "control (kube-scheduler) stranded"
    assert control_text("kube-scheduler", None) == "no control run"


# --- the pre-check


def test_a_rule_that_only_matches_watches_fires_only_with_a_reconnect() -> None:
    watch_only = Genome(rules=(rule("abort", WATCH),))
    assert not precheck.can_inject(watch_only)
    with_reset = Genome(rules=(rule("abort", WATCH), rule("resetUpstream", name="r2-resetupstream-binding")))
    assert precheck.can_inject(with_reset)


@pytest.mark.parametrize(("r", "fires"), [
    (rule("abort"), True),
    (rule("abort", trigger={"match": dict(BINDING), "count": 41}), False),  # above the load's 40 bindings
    (rule("abort", trigger={"match": dict(BINDING), "count": 40}), True),
    (rule("abort", afterMatches=40), False),
    (rule("abort", {**BINDING, "namespaces": ["kube-system"]}), False),
    (rule("abort", {**BINDING, "namespaces": ["s-*"]}), True),
    (rule("abort", {"resources": ["events"]}), True),
    (dict(rule("abort", trigger={"match": dict(BINDING), "count": 34}), probability=0.1), False),  # 6 left at 0.1
    (dict(rule("abort", trigger={"match": dict(BINDING), "count": 20}), probability=0.1), True),  # 20 left
])
def test_rules_that_can_never_fire_on_the_workload(r: dict[str, Any], fires: bool) -> None:
    assert precheck.can_inject(Genome(rules=(r,), pods=40)) is fires


def test_a_late_window_fires_only_when_another_rule_holds_binds_back() -> None:
    late = rule("delay", name="r1-delay-binding", after="2s", **{"for": "10s"})
    assert not precheck.can_inject(Genome(rules=(late,)))
    assert precheck.can_inject(Genome(rules=(late, rule("abort", name="r2-abort-binding"))))


def test_kube_scheduler_writes_no_pod_so_a_pod_write_match_never_fires_there() -> None:
    write = Genome(rules=(rule("abort", {"verbs": ["patch", "update"], "resources": ["pods"]}, "r1-abort-pod-write"),))
    assert not precheck.can_inject(write, scheduler="kube-scheduler")
    assert precheck.can_inject(write, scheduler="yunikorn")


def test_an_edit_of_deleted_events_only_needs_a_trial_that_deletes_pods() -> None:
    """The short YuniKorn search of 2026-12-04 drew `duplicateEvents {types: [DELETED]}` on pod watches three
    times with no action: a scheduler's trial deletes no pod, so it never fired."""
    deleted = {**rule("duplicateEvents", WATCH, "r2-duplicateevents-pod-watch"),
               "fault": {"duplicateEvents": {"events": {"types": ["DELETED"]}}}}
    modified = {**deleted, "fault": {"duplicateEvents": {"events": {"types": ["DELETED", "MODIFIED"]}}}}
    reset = rule("resetUpstream", name="r1-resetupstream-binding")
    for scheduler in ("kube-scheduler", "yunikorn"):
        assert not precheck.rule_can_fire(deleted, Genome(rules=(deleted, reset)), True, scheduler=scheduler)
        assert precheck.rule_can_fire(deleted, Genome(rules=(deleted, reset), action="deletePods"), True,
                                      scheduler=scheduler)
        assert precheck.rule_can_fire(modified, Genome(rules=(modified, reset)), True, scheduler=scheduler)
    # kube-controller-manager's controllers delete pods themselves (scale-downs, replaced pods)
    assert precheck.rule_can_fire(deleted, Genome(rules=(deleted, reset)), True,
                                  scheduler="kube-controller-manager")


def test_a_stale_list_fires_on_the_schedulers_watch_list_relists_never_on_a_list() -> None:
    reset = rule("resetUpstream", name="r2-resetupstream-binding")
    on_lists = rule("staleList", {"verbs": ["list"], "resources": ["pods"]}, "r1-stalelist-pod-list")
    on_watches = rule("staleList", WATCH, "r1-stalelist-pod-watch")
    expire = rule("expire", WATCH, "r3-expire-pod-watch")
    outage = {**rule("outage", name="r2-outage-binding"), "fault": {"outage": {"seconds": 1.0}}}
    crash = rule("crashPoint", trigger={"match": dict(BINDING), "count": 5}, name="r2-crashpoint-binding")
    for scheduler in ("kube-scheduler", "yunikorn"):  # YuniKorn's watches are protobuf: their revisions are read
        assert not precheck.rule_can_fire(on_lists, Genome(rules=(on_lists, reset)), True, scheduler=scheduler)
        assert precheck.rule_can_fire(on_watches, Genome(rules=(on_watches, reset)), True, scheduler=scheduler,
                                      relists=True)
        assert precheck.can_inject(Genome(rules=(on_watches, reset)), scheduler=scheduler), \
            "after a reset the schedulers relist through a WatchList"
        assert not precheck.can_inject(Genome(rules=(on_watches, outage)), scheduler=scheduler), \
            "after an outage the watch is resumed from its revision: no WatchList to serve"
        assert precheck.can_inject(Genome(rules=(on_watches, outage, expire)), scheduler=scheduler), \
            "the resumed watch expired: the informer relists through a WatchList"
        assert not precheck.can_inject(Genome(rules=(on_watches, reset, expire)), scheduler=scheduler), \
            "after a reset nothing resumes: the expire never acts"
        assert precheck.can_inject(Genome(rules=(on_watches, crash)), scheduler=scheduler), "a restart relists"
    assert precheck.rule_can_fire(on_lists, Genome(rules=(on_lists, reset)), True), "another client may LIST"


@pytest.mark.parametrize(("when", "fires"), [
    ({"maxInjections": 2}, True),
    ({"maxInjections": 2, "afterMatches": 10}, False),  # ten watch requests: a reopen makes one per resource
    ({"maxInjections": 2, "every": 3}, False),
    ({"maxInjections": 2, "after": "2s", "for": "5s"}, False),
    ({"maxInjections": 2, "trigger": {"match": dict(BINDING), "count": 5}}, True),  # armed by the reopen at 10
    ({"maxInjections": 2, "trigger": {"match": dict(BINDING), "count": 20}}, False),  # armed after it
])
def test_a_watch_rule_acts_on_the_watch_a_reopen_opens(when: dict[str, Any], fires: bool) -> None:
    dup = {"name": "r1-duplicateevents-pod-watch", "match": dict(WATCH), "when": when,
           "fault": {"duplicateEvents": {"probability": 1.0}}}
    reset = rule("resetUpstream", name="r2-resetupstream-binding", trigger={"match": dict(BINDING), "count": 10})
    abort = rule("abort", name="r3-abort-binding")
    assert precheck.can_inject(Genome(rules=(dup, reset, abort), pods=40), scheduler="kube-scheduler") is fires
    cut = {**dup, "name": "r1-cut-pod-watch", "fault": {"cut": {"afterSeconds": 1}}}  # no event read: YuniKorn too
    assert precheck.can_inject(Genome(rules=(cut, reset, abort), pods=40), scheduler="yunikorn") is fires
    assert not precheck.can_inject(Genome(rules=(dup, abort), pods=40), scheduler="kube-scheduler"), \
        "the abort fires, the watch rule never: not a trial of it"


def test_a_crash_point_needs_a_write_the_workload_makes() -> None:
    at = {"match": dict(BINDING), "answered": True}
    assert precheck.can_inject(Genome(rules=(rule("crashPoint", trigger={**at, "count": 40}),), pods=40))
    assert not precheck.can_inject(Genome(rules=(rule("crashPoint", trigger={**at, "count": 41}),), pods=40))
    reads = rule("crashPoint", {"verbs": ["get"], "resources": ["pods"]}, "r1-crashpoint-pod-get")
    assert not precheck.can_inject(Genome(rules=(reads,)), scheduler="yunikorn"), "a GET commits nothing"
    assert precheck.can_inject(Genome(rules=(rule("abort", {"verbs": ["get"], "resources": ["pods"]}),)))
    write = rule("crashPoint", {"verbs": ["patch", "update"], "resources": ["pods"]}, "r1-crashpoint-pod-write")
    assert not precheck.can_inject(Genome(rules=(write,)), scheduler="kube-scheduler")
    assert precheck.can_inject(Genome(rules=(write,)), scheduler="yunikorn")


def test_forms_that_ran_often_and_never_injected_are_learned_dead() -> None:
    dead = precheck.dead_forms({"abort-binding": 3, "delay-events": 3, "cut-pod-watch": 2}, {"abort-binding": 1})
    assert dead == {"delay-events"}
    assert not precheck.can_inject(Genome(rules=(rule("delay", {"resources": ["events"]}, "r1-delay-events"),)),
                                   dead)


def test_the_pre_check_keeps_the_drawn_trials_that_cannot_inject_under_a_tenth(tmp_path: Path) -> None:
    for scheduler, kinds in (("yunikorn", ALL_KINDS), ("kube-scheduler", ALL_KINDS),
                             ("yunikorn", ("abort", "reset", "hang", "commitThenFail", "expire", "cut"))):
        search = Search(Settings(scheduler=scheduler, control=None, budget=60, seed=5, kinds=kinds, out=tmp_path,
                                 state_dir=tmp_path, profiles_dir=tmp_path), lambda _: None)
        drawn = [search.genome(n, []) for n in range(200)]
        assert sum(1 for g in drawn if not precheck.can_inject(g, scheduler=scheduler)) < 20
        assert search.prechecked > 0  # it did redraw some


def test_kube_scheduler_replays_outwait_its_bind_retry(tmp_path: Path) -> None:
    from kube_fault_proxy.rig.search.trial import CONFIRM, CONTROL, PATIENT

    tier = Search(settings(tmp_path), lambda _: None).confirm_tier
    assert tier is PATIENT and tier.quiet == CONTROL.quiet
    yk = Settings(scheduler="yunikorn", control="kube-scheduler", budget=60, seed=1, kinds=("abort",), out=tmp_path,
                  state_dir=tmp_path, profiles_dir=tmp_path)
    assert Search(yk, lambda _: None).confirm_tier is CONFIRM


def _controlled(monkeypatch: pytest.MonkeyPatch, broken: list[str], control: list[str]) -> list[str]:
    """Trials faked: the target's (and its replay) break `broken`, each control run `control`; the names run."""
    def trial(self: Search, scheduler: str, genome: Genome, name: str, tier: Tier = SEARCH) -> TrialResult:
        ran.append(name)
        tiers[name] = tier.name
        return TrialResult(name, scheduler, genome, broken=list(control if "-control" in name else broken),
                           injections=1, seconds=1.0)

    ran: list[str] = []
    monkeypatch.setattr(Search, "trial", trial)
    return ran


tiers: dict[str, str] = {}  # the tier each faked trial ran at (_controlled), by name


@pytest.mark.parametrize(("control", "verdict"), [
    ([], "confirmed"),
    (["no-anti-affinity-breach"], "confirmed"),  # the control's own violation: reported apart, no disqualifier
    (["stranded"], "control-broken"),  # one of the hit's invariants: the faults break it, not the scheduler
    (["no-anti-affinity-breach", "stranded"], "control-broken"),
    (["error: the control plane did not start"], "control-broken"),
])
def test_a_control_disqualifies_a_hit_only_by_breaking_one_of_its_invariants(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, control: list[str], verdict: str) -> None:
    ran = _controlled(monkeypatch, ["I1", "stranded"], control)
    s = Search(settings(tmp_path, control="kube-scheduler"), lambda _: None)
    g = Genome(rules=(rule("resetUpstream"),), pods=20)
    hit = s.confirm(0, g, TrialResult("t0", "yunikorn", g, broken=["I1", "stranded"], injections=1))
    assert (hit.verdict, hit.control, hit.target) == (verdict, control, ["I1", "stranded"])
    # Three control runs unless one already disqualifies the hit (it stops there: the rest cannot confirm it).
    controls = ["t0-control", "t0-control-2", "t0-control-3"] if verdict == "confirmed" else ["t0-control"]
    assert ran == ["t0-replay", *controls] and tiers["t0-control"] == "control"  # another scheduler: 25 s
    out = Outcome(s.s, hits=[hit], confirmed=hit, target=hit.target, shrunk=Shrunk(g, []), replays=[hit.target])
    report = write(out, ["search"]).read_text()
    own = "broke other invariants than the hit's under the same profile"
    assert ("control broke one of their invariants too (the rig's or the workload's fault, not the scheduler's): 1"
            in report) is (verdict == "control-broken")
    assert (own in report and "trial 0: no-anti-affinity-breach" in report) is (verdict == "confirmed" and bool(control))


def test_yunikorns_protobuf_watches_are_edited_as_json_and_take_a_stale_view() -> None:
    """YuniKorn asks for protobuf first and accepts JSON: an edited watch is asked for in JSON (watch-as-json), so
    every event kind acts on it; a stale view serves revisions the proxy read from its protobuf watches."""
    crash = rule("crashPoint", trigger={"match": dict(BINDING), "count": 5}, name="r2-crashpoint-binding")
    for kind in ("staleList", "delayEvents", "duplicateEvents", "holdEvents", "dropEvents", "coalesceEvents"):
        g = Genome(rules=(rule(kind, WATCH, f"r1-{kind.lower()}-pod-watch"), crash))
        assert precheck.can_inject(g, scheduler="kube-scheduler"), kind
        assert precheck.can_inject(g, scheduler="yunikorn"), kind


def test_a_rewritten_report_leaves_no_directory_of_a_finding_renamed_since(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Findings are renumbered and renamed as they come and shrink: an earlier writing's directory for a name no
    finding has now goes; a directory that is not one of the search's own stays."""
    monkeypatch.setattr(Search, "trial", fake_trial)
    out = Search(settings(tmp_path, max_trials=30, shrink_total=0.0), lambda _: None).run()
    assert out.findings
    stale = tmp_path / "findings" / "7-stranded-abort-on-binding"
    stale.mkdir(parents=True)
    (stale / "report.md").write_text("an earlier writing")
    (stale / "search.json").write_text("{}")
    mine = tmp_path / "findings" / "notes"
    mine.mkdir()
    (mine / "report.md").write_text("the user's own")
    write(out, ["search"])
    assert sorted(d.name for d in (tmp_path / "findings").iterdir()) == sorted(
        [f.slug(i) for i, f in enumerate(out.findings, 1)] + ["notes"])


@pytest.mark.parametrize(("control", "verdict", "target", "shared"), [
    (["I1"], "confirmed", ["no-assumed-pod-left"], ["I1"]),  # the release's own bug beside the planted one
    (["I1", "no-assumed-pod-left"], "control-broken", ["I1", "no-assumed-pod-left"], []),
    (["I1", "no-overcommit"], "confirmed", ["no-assumed-pod-left"], ["I1"]),  # and one of the control's own
    (["error: the control plane did not start"], "control-broken", ["I1", "no-assumed-pod-left"], []),
])
def test_a_control_of_the_same_scheduler_takes_away_only_what_it_broke_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, control: list[str], verdict: str, target: list[str],
        shared: list[str]) -> None:
    """A control by build (or by gates, or without the fault) is judged by the target's own invariants: what it
    broke too under the same profile is the faults' effect (or the release's own bug), and the hit is confirmed on
    the rest. A planted bug beside the release's known one is found this way (the mutation benchmark's masking)."""
    ran = _controlled(monkeypatch, ["I1", "no-assumed-pod-left"], control)
    yk = Settings(scheduler="yunikorn", control="build:released", budget=60, seed=1, kinds=("abort",), out=tmp_path,
                  state_dir=tmp_path, profiles_dir=tmp_path, yunikorn_patch=tmp_path / "planted.patch")
    s = Search(yk, lambda _: None)
    g = Genome(rules=(rule("abort"),), pods=20)
    hit = s.confirm(0, g, TrialResult("t0", "yunikorn", g, broken=["I1", "no-assumed-pod-left"], injections=1))
    assert (hit.verdict, hit.target, hit.shared) == (verdict, target, shared)
    # Three control runs while something is left to confirm; the first that leaves nothing ends them.
    assert ran == ["t0-replay", *(["t0-control", "t0-control-2", "t0-control-3"] if verdict == "confirmed"
                                  else ["t0-control"])]
    assert Hit.as_dict(hit)["shared"] == shared
    # controlled at the replay's tier (YuniKorn's 8 s of quiet), not the 25 s another scheduler as control needs
    assert tiers["t0-replay"] == tiers["t0-control"] == "confirm"
    if verdict == "confirmed":
        out = Outcome(s.s, hits=[hit], confirmed=hit, target=hit.target, shrunk=Shrunk(g, []), replays=[hit.target])
        report = write(out, ["search"]).read_text()
        assert "trial 0: no-assumed-pod-left confirmed, I1 shared" in report
        assert ("trial 0: no-overcommit" in report) is ("no-overcommit" in control)
    else:  # the same scheduler broke it all too: the faults' effect or the release's own bug, never the rig's
        out = Outcome(s.s, hits=[hit], target=hit.target)
        report = write(out, ["search"]).read_text()
        assert "the control broke all of their invariants too (the faults' effect, or a bug the control has too): 1" \
            in report and "the rig's or the workload's fault" not in report


def test_another_scheduler_as_the_control_still_disqualifies_a_hit_by_one_shared_break(tmp_path: Path) -> None:
    """kube-scheduler as YuniKorn's control is judged by other invariants (no I1-I5): one shared break is enough."""
    from kube_fault_proxy.rig.search.outcome import kept_by_control
    assert kept_by_control(["stranded"], ["I3", "stranded"]) == []
    assert kept_by_control(["stranded"], ["I3", "stranded"], same_judge=True) == ["I3"]
    assert kept_by_control([], ["I3"]) == ["I3"] and kept_by_control(None, ["I3"], same_judge=True) == ["I3"]
    yk = Settings(scheduler="yunikorn", control="kube-scheduler", budget=60, seed=1, kinds=("abort",), out=tmp_path,
                  state_dir=tmp_path, profiles_dir=tmp_path)
    assert not Search(yk, lambda _: None).same_judge
    assert Search(settings(tmp_path), lambda _: None).same_judge  # no fault: the same scheduler


def test_a_known_bug_is_not_matched_on_what_the_control_broke_too(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The planned cluster test's hit: a planted build breaks I3, I4, I5 and stranded on an aborted Binding, the
    released build I3, I4 and stranded. The hit is I5 alone: YUNIKORN-3128 (I3, within I3, I4, I5 and stranded) may
    not claim it through the shared part of either run."""
    broken = ["I3", "I4", "I5", "stranded"]
    _controlled(monkeypatch, broken, ["I3", "I4", "stranded"])
    yk = Settings(scheduler="yunikorn", control="build:released", budget=60, seed=1, kinds=("abort",), out=tmp_path,
                  state_dir=tmp_path, profiles_dir=tmp_path, yunikorn_patch=tmp_path / "planted.patch", controls=1)
    s = Search(yk, lambda _: None)
    s.builds["yunikorn"] = "yunikorn v1.9.0+planted-0123456789ab"
    g = Genome(rules=(rule("abort", dict(BINDING)),), pods=20)
    out = Outcome(s.s)
    verdict = s.file_hit(0, g, TrialResult("p0", "yunikorn", g, broken=broken, injections=1), out)
    assert verdict == "confirmed" and out.hits[0].target == ["I5"] and out.hits[0].known is None
    assert [f.target for f in out.findings] == [["I5"]]
    # the same hit with another scheduler as the control that kept everything: 3128 as before (its I5 beside it)
    _controlled(monkeypatch, broken, [])
    ks = Search(Settings(scheduler="yunikorn", control="kube-scheduler", budget=60, seed=1, kinds=("abort",),
                         out=tmp_path, state_dir=tmp_path, profiles_dir=tmp_path, controls=1), lambda _: None)
    ks.builds["yunikorn"] = "yunikorn v1.9.0"
    out = Outcome(ks.s)
    assert ks.file_hit(0, g, TrialResult("p0", "yunikorn", g, broken=broken, injections=1), out) == "known"
    assert out.hits[0].known == "YUNIKORN-3128"


@pytest.mark.parametrize(("control_build", "control", "verdict", "known"), [
    ("yunikorn v1.9.0", ["I3", "I4", "stranded"], "confirmed", None),  # the release has 3355, kept its phantom
    ("yunikorn v1.8.0", ["I3", "I4", "stranded"], "known", "YUNIKORN-3355"),  # a control without 3355: no say
    ("yunikorn v1.9.0+3355-closing-fix-0123", ["I3", "I4", "stranded"], "known", "YUNIKORN-3355"),  # fixed there
])
def test_a_known_bug_the_control_build_has_and_kept_is_not_what_the_target_showed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, control_build: str, control: list[str], verdict: str,
        known: str | None) -> None:
    """A planted 409-taken-as-bound books a phantom (I2), YUNIKORN-3355's signature, where the release under the same
    profile shows YUNIKORN-3128 instead: the release has 3355 and did not show it, so the phantom is the planted
    change's, a finding, not 3355 again (the mutation benchmark, 2026-12-07)."""
    _controlled(monkeypatch, ["I2", "stranded"], control)
    yk = Settings(scheduler="yunikorn", control="build:released", budget=60, seed=1, kinds=("abort",), out=tmp_path,
                  state_dir=tmp_path, profiles_dir=tmp_path, yunikorn_patch=tmp_path / "planted.patch")
    s = Search(yk, lambda _: None)
    s.builds.update({"yunikorn": "yunikorn v1.9.0+planted-0123456789ab", "build:released": control_build})
    g = Genome(rules=(rule("abort", dict(BINDING)),), pods=20)
    out = Outcome(yk)
    s.file_hit(0, g, TrialResult("t0", "yunikorn", g, broken=["I2", "stranded"], injections=1), out)
    hit = out.hits[0]
    assert (hit.verdict, hit.known) == (verdict, known), hit
