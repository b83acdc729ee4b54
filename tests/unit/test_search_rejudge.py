"""`search rejudge`: stored hits judged again (rig/search/rejudge.py) on excerpts of the records' search.json
(tests/unit/data/rejudge/): each class can come out, the ledger's reach is read from the profile, and the replay
directories are what `search replay` reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.cli.main import main
from kube_fault_proxy.rig.invariants import excuses
from kube_fault_proxy.rig.search import known, rejudge, rejudged_report
from kube_fault_proxy.rig.search.genome import Genome

DATA = Path(__file__).with_name("data") / "rejudge"
RULES = rejudge.Rules(known.shipped(), controls=3)
POD_CREATE = {"resources": ["pods"], "verbs": ["create"]}
POD_WATCH = {"resources": ["pods"], "verbs": ["watch"]}
NODE_WATCH = {"resources": ["nodes"], "verbs": ["watch"]}


def by_trial(name: str, rules: rejudge.Rules = RULES) -> dict[int, rejudge.Rejudged]:
    return {h.trial: h for h in rejudge.read(DATA / name, rules).hits}


def rule(kind: str, match: dict[str, Any], settings: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": f"r-{kind.lower()}", "match": match, "fault": {kind: settings or {}}}


def test_the_kcm_campaign_of_2026_12_04_rejudged() -> None:
    hits = by_trial("kcm-2026-12-04.json")
    # Group 1: an outage at status writes, confirmed on one control run; no rule of it makes a lost pod create.
    assert (hits[24].before, hits[24].after) == ("confirmed", "under-controlled")
    assert "confirmed on 1 clean control run of the 3" in hits[24].why
    assert "job-never-over-completions: its excuse counts a pods create that committed unanswered" in hits[24].why
    assert hits[24].blind and "the ledger is blind to it" in hits[24].why  # it cut connections: resetUpstream, outage
    # failThenCommit on pod creates can make the lost create the surplus rule counts: only the journal can say.
    assert (hits[44].before, hits[44].after) == ("control-broken", "undecided")
    assert not hits[44].blind
    # Decided by runs, and the ledger cannot excuse them: as recorded.
    assert (hits[16].after, hits[0].after) == ("control-broken", "not-reproduced")
    assert hits[16].blind and hits[0].blind


def test_a_confirmed_hit_with_enough_controls_stays_confirmed() -> None:
    hits = by_trial("kcm-2026-12-04.json", rejudge.Rules(known.shipped(), controls=1))
    assert (hits[53].before, hits[53].after) == ("confirmed", "confirmed")
    assert hits[24].after == "confirmed"


def test_a_confirmed_hit_of_a_known_bug_is_known_now() -> None:
    hits = by_trial("kube-scheduler-async-2026-12-04.json")
    assert (hits[4].before, hits[4].after) == ("confirmed", "known")
    assert hits[4].why.startswith("kube-scheduler-committed-bind-left-unscheduled (known-findings.yaml")
    assert "bound-pod-scheduled: no ledger effect excuses it" in hits[4].why
    # dropEvents on the node watch only: a node's dropped ADDED may excuse `stranded`, and no journal was kept.
    assert hits[20].after == "undecided"
    assert "only the journal can say" in hits[20].why


def test_hits_the_search_judged_from_the_journal_keep_that_judgement() -> None:
    hits = by_trial("dra-binding-2026-12-06.json")
    assert (hits[22].before, hits[22].after) == ("excused", "excused")
    assert "judged from the journal when the search ran: excused: the proxy dropped the ADDED" in hits[22].why
    assert (hits[8].before, hits[8].after) == ("not-reproduced", "not-reproduced")
    assert "judged from the journal when the search ran: not excused:" in hits[8].why
    older = by_trial("kube-scheduler-1.38-2026-12-06.json")
    assert (older[77].before, older[77].after) == ("fault-effect", "excused")  # `excused`'s older name
    assert (older[4].before, older[4].after) == ("known", "known")
    stored = rejudge.read(DATA / "kube-scheduler-1.38-2026-12-06.json", RULES)
    assert stored.before() == stored.after() == {"excused": 1, "known": 1}


@pytest.mark.parametrize(("broken", "rules", "action", "possible", "why"), [
    (["replicaset-never-over-replicas"], [rule("commitThenFail", POD_CREATE)], None, True, "only the journal"),
    (["job-never-over-completions"], [rule("failThenCommit", {})], None, True, "only the journal"),
    (["replicaset-never-over-replicas"], [rule("resetUpstream", POD_CREATE)], None, False, "no rule of the profile"),
    (["replicaset-never-over-replicas"], [rule("commitThenFail", {**POD_CREATE, "subresources": ["binding"]})],
     None, False, "no rule of the profile"),
    (["stranded"], [rule("dropEvents", POD_WATCH, {"events": {"types": ["ADDED"]}})], None, True, "only the journal"),
    (["stranded"], [rule("dropEvents", POD_WATCH, {"events": {"types": ["MODIFIED"]}})], None, False,
     "a dropped ADDED event"),
    (["stranded"], [rule("dropEvents", POD_WATCH)], "touchPods", False, "re-announces"),
    # a node's dropped ADDED excuses `stranded` (touchPods re-announces pods, not nodes), and nothing else
    (["stranded"], [rule("dropEvents", NODE_WATCH, {"events": {"types": ["ADDED"]}})], "touchPods", True,
     "only the journal"),
    (["stranded"], [rule("dropEvents", NODE_WATCH, {"events": {"types": ["MODIFIED"]}})], None, False,
     "a dropped ADDED event of pods"),
    (["no-pod-waits-past-bound"], [rule("dropEvents", NODE_WATCH)], None, False, "a dropped ADDED event of pods"),
    (["stranded", "bound-pod-scheduled"], [rule("dropEvents", POD_WATCH)], None, False,
     "bound-pod-scheduled: no ledger effect excuses it"),
])
def test_what_the_ledger_might_excuse_is_read_from_the_profile(broken: list[str], rules: list[dict[str, Any]],
                                                                action: str | None, possible: bool, why: str) -> None:
    got, text = rejudge.excusable(broken, Genome(rules=tuple(rules), action=action))
    assert got is possible
    assert why in text


def test_every_excuse_rule_has_what_it_counts_named() -> None:
    assert set(excuses.RULES.values()) <= set(rejudge.NEEDS)


def test_a_record_that_kept_only_a_minimal_case_says_so() -> None:
    stored = rejudge.read(DATA / "minimal-only-2026-12-03.json", RULES)
    assert stored.hits == [] and stored.note is not None and "hits were not kept" in stored.note
    row = [line for line in rejudged_report.table([stored]) if "minimal-only" in line]
    assert len(row) == 1 and "hits were not kept" in row[0]


def test_the_table_has_a_before_and_an_after_row_per_search() -> None:
    stored = rejudge.read(DATA / "kcm-2026-12-04.json", RULES)
    rows = [line.split(" | ") for line in rejudged_report.table([stored], DATA)[2:]]
    before, after = rows
    assert before[0] == "| `kcm-2026-12-04.json` before" and after[0] == "| `kcm-2026-12-04.json` after"
    # hits, excused, undecided, control-broken, not-reproduced, no-injection, known, under-controlled, confirmed
    assert before[1:10] == ["5", "0", "0", "2", "1", "0", "0", "0", "2"]
    assert after[1:10] == ["5", "0", "1", "1", "1", "0", "0", "2", "0"]
    assert after[10] == "4 |"  # 24, 53, 16 and 0 cut connections; 44 is undecided


def test_replay_directories_hold_what_search_replay_reads(tmp_path: Path) -> None:
    file, doc = rejudge.load_doc(DATA / "kcm-2026-12-04.json")
    stored = rejudge.rejudge(doc, file, RULES)
    made = rejudged_report.write_replays(doc, stored, tmp_path)
    assert sorted(d.name for d in made) == ["t24", "t24-control", "t44", "t53", "t53-control"]
    target = json.loads((tmp_path / "t24" / "search.json").read_text())
    control = json.loads((tmp_path / "t24-control" / "search.json").read_text())
    assert target["target"] == ["job-never-over-completions", "workload-converges"] and target["nodes"] == 4
    assert target["featureGates"] == {}
    assert control["featureGates"] == {"kube-controller-manager": {
        "StaleControllerConsistencyDaemonSet": False, "StaleControllerConsistencyJob": False,
        "StaleControllerConsistencyReplicaSet": False, "StaleControllerConsistencyStatefulSet": False}}
    minimal = target["minimal"]
    genome = Genome(rules=tuple(minimal["rules"]), pods=minimal["pods"], action=minimal["action"],
                    seed=minimal["seed"])
    assert len(genome.profile().spec.rules) == 3  # the strict loader takes it, as `search replay` does


def test_an_unfaulted_control_replays_the_workload_without_the_profile() -> None:
    hit = rejudge.Rejudged(3, ("stranded",), "confirmed", "under-controlled", "")
    doc = {"scheduler": "kube-scheduler", "control": "unfaulted", "nodes": 20}
    out = rejudged_report.replay_doc(doc, hit, Genome(rules=(rule("dropEvents", POD_WATCH),), pods=40), control=True)
    assert out["minimal"]["rules"] == [] and out["minimal"]["pods"] == 40 and out["scheduler"] == "kube-scheduler"


@pytest.mark.parametrize(("scheduler", "control", "patches"), [
    ("yunikorn", "build:released", {"yunikornPatch": None, "kubeSchedulerPatch": None}),
    ("yunikorn", "build:patch=/p/base.patch", {"yunikornPatch": "/p/base.patch", "kubeSchedulerPatch": None}),
    ("kube-scheduler", "build:released", {"yunikornPatch": None, "kubeSchedulerPatch": None}),
    ("kube-scheduler", "build:patch=/p/base.patch", {"yunikornPatch": None, "kubeSchedulerPatch": "/p/base.patch"}),
])
def test_a_control_by_build_replays_the_same_scheduler_as_that_build(scheduler: str, control: str,
                                                                      patches: dict[str, str | None]) -> None:
    """Not `scheduler: build:released`, which no replay can start: the target's scheduler, its patch or source
    tree replaced by the control's (none for the release)."""
    hit = rejudge.Rejudged(3, ("stranded",), "confirmed", "under-controlled", "")
    doc = {"scheduler": scheduler, "control": control, "nodes": 10, "build": f"{scheduler} v9+mutant",
           "yunikornPatch": "/p/mutant.patch" if scheduler == "yunikorn" else None, "yunikornSource": None,
           "kubeSchedulerPatch": "/p/mutant.patch" if scheduler == "kube-scheduler" else None}
    genome = Genome(rules=(rule("dropEvents", POD_WATCH),), pods=40)
    target = rejudged_report.replay_doc(doc, hit, genome)
    out = rejudged_report.replay_doc(doc, hit, genome, control=True)
    assert target["scheduler"] == out["scheduler"] == scheduler
    assert "/p/mutant.patch" in (target["yunikornPatch"], target["kubeSchedulerPatch"])
    assert {k: out[k] for k in patches} == patches and out["yunikornSource"] is None and out["build"] is None
    assert out["minimal"] == target["minimal"] and out["rejudged"]["control"] is True


@pytest.mark.parametrize(("text", "error"), [
    ("{", "not JSON"),
    ("[]", "a search.json is a JSON object, not list"),
    ('{"hits": []}', "field 'scheduler' is None"),
    ('{"scheduler": "kube-scheduler", "hits": {}}', "field 'hits' is a dict, not a list"),
    ('{"scheduler": "kube-scheduler", "hits": [{"trial": 1, "broken": [], "verdict": "confirmed"}]}',
     "hits[0]: a hit has no field 'genome'"),
    ('{"scheduler": "kube-scheduler", "hits": [{"trial": 1, "broken": [], "verdict": "x", "genome": "{}"}]}',
     "hits[0]: field 'genome' is not a genome"),
])
def test_a_bad_search_json_names_the_file_and_the_field(tmp_path: Path, text: str, error: str) -> None:
    (tmp_path / "search.json").write_text(text)
    with pytest.raises(rejudge.RejudgeError, match=r"search\.json") as e:
        rejudge.read(tmp_path, RULES)
    assert error in str(e.value)


def test_the_command_prints_the_table_and_the_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["search", "rejudge", str(DATA / "kcm-2026-12-04.json"), str(DATA / "minimal-only-2026-12-03.json"),
                 "--hits", "--json", str(tmp_path / "out.json"), "--write-replays", str(tmp_path / "replays")])
    out = capsys.readouterr().out
    assert code == 0
    assert "| 24 | job-never-over-completions, workload-converges | confirmed | **under-controlled** |" in out
    assert f"kube-fault-proxy search replay {tmp_path}/replays/1-rejudge/t24-control --times 2" in out
    assert f"kube-fault-proxy search replay {tmp_path}/replays/1-rejudge/t44 --times 5" in out
    written = json.loads((tmp_path / "out.json").read_text())
    assert [len(s["hits"]) for s in written] == [5, 0] and written[1]["note"].startswith("a minimal case only")


def test_the_command_refuses_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "rejudge", str(tmp_path / "nowhere.json")]) == 2
    assert "nowhere.json: cannot be read" in capsys.readouterr().err


def test_the_findings_of_a_record_survive_or_not() -> None:
    kcm = rejudge.read(DATA / "kcm-2026-12-04.json", RULES)
    verdicts = [g.verdict(kcm.hits) for g in kcm.groups]
    assert verdicts[0] == "pending: more control runs; the ledger blind: its profile cuts connections"
    assert verdicts[1].endswith("; 1 other hit with its invariants and kinds broke under the control too (trial 16)")
    one = rejudge.read(DATA / "kcm-2026-12-04.json", rejudge.Rules(known.shipped(), controls=1))
    assert [g.verdict(one.hits) for g in one.groups] == ["survives", "survives"]
    scheduler = rejudge.read(DATA / "kube-scheduler-async-2026-12-04.json", RULES)
    assert [g.verdict(scheduler.hits) for g in scheduler.groups] == [
        "does not survive: known (kube-scheduler-committed-bind-left-unscheduled)",
        "pending: a replay with the journal"]
    lines = rejudged_report.group_lines(scheduler)
    assert lines[2] == ("| 1 | bound-pod-scheduled; resetUpstream on binding; staleList on pod-watch | 4 | 1/5 | "
                        "does not survive: known (kube-scheduler-committed-bind-left-unscheduled) |")


def test_the_record_holds_what_the_command_prints_over_the_records() -> None:
    root = Path(__file__).resolve().parents[2]
    record = (root / "docs" / "records" / "rejudged-findings-2026-12-06.md").read_text()
    command = record.split("kube-fault-proxy search rejudge \\\n", 1)[1].split("\n```", 1)[0]
    paths = [p for p in command.replace("\\\n", " ").split() if p.startswith("docs/records/")]
    assert len(paths) == 14
    stored = [rejudge.read(root / p, RULES) for p in paths]
    table = rejudged_report.table(stored, root)
    assert "\n".join(table) in record
    assert len(table) == 2 + 2 * 8 + 6  # a before and an after row per search with hits; one per minimal case


def test_the_kinds_each_effect_comes_from_are_read_from_the_registry() -> None:
    assert set(rejudge.LOST_CREATE_KINDS) == {"commitThenFail", "crashPoint", "failThenCommit"}
    assert set(rejudge.EVENT_DROPPING_KINDS) == {"dropEvents"}
    assert set(rejudge.CUTTING) == {"outage", "resetUpstream", "stallConnection"}  # a client may close a stalled one


def test_a_control_of_the_same_scheduler_that_broke_a_part_leaves_the_rest_to_judge() -> None:
    """Since 2026-12-07 a hit is confirmed on what a control of the same scheduler kept: a stored control-broken hit
    whose control (the gate off) broke only `bound-pod-scheduled` of `bound-pod-scheduled, no-overcommit` is judged
    on `no-overcommit`, a known bug (kubernetes-100140's over-commit); with another scheduler as the control, the
    one shared break still disqualifies it."""
    root = Path(__file__).resolve().parents[2]
    doc = json.loads((root / "docs/records/campaign-2026-12-04-kube-scheduler-async/search.json").read_text())
    [hit] = [h for h in doc["hits"] if h["trial"] == 104]
    assert (hit["verdict"], hit["control"]) == ("control-broken", ["bound-pod-scheduled"])
    base = {k: doc[k] for k in ("scheduler", "build", "control")} | {"hits": [hit]}
    [same] = rejudge.rejudge(base, Path("same.json"), RULES).hits
    assert (same.before, same.after) == ("control-broken", "known"), same.why
    assert "confirmed on no-overcommit: the control (gates:SchedulerAsyncAPICalls=false, the same scheduler) " \
           "broke only bound-pod-scheduled of it" in same.why
    [other] = rejudge.rejudge(base | {"control": "yunikorn"}, Path("other.json"), RULES).hits
    assert (other.before, other.after) == ("control-broken", "control-broken"), other.why
    # a control that broke all of it leaves nothing
    [whole] = rejudge.rejudge(base | {"hits": [hit | {"control": hit["broken"]}]}, Path("whole.json"), RULES).hits
    assert whole.after == "control-broken"
