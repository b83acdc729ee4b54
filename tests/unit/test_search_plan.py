"""Planned perturbations (`search --plan`): causal points read from a recorded history and journal (a scheduler's
Bindings and status writes, kube-controller-manager's pod creates and status writes, the events each consumed), the
plan built on them by traits (a crash point and a late commit at the Nth write by a count trigger, a stale view with
its reopen, the consumed event edited), the round-robin order over groups, the coverage, and the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.cli.main import parser
from kube_fault_proxy.cli.search import UsageError, _settings
from kube_fault_proxy.rig.invariants.history import Change, History
from kube_fault_proxy.rig.search import causal, planned, plans
from kube_fault_proxy.rig.search.genome import Genome, fault_kind, valid
from kube_fault_proxy.rig.search.grammar import KNOWN_KINDS
from kube_fault_proxy.rig.search.kinds import traits
from kube_fault_proxy.rig.search.waist import BINDING, CONTROLLERS, POD_CREATE, SCHEDULER

T0 = 1_000.0
NS = "s-ref-1"


def pod(name: str, rv: int, node: str = "", scheduled_false: bool = False, owner: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "resourceVersion": str(rv)}
    if owner:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "name": owner, "uid": "u-" + owner, "controller": True}]
    status: dict[str, Any] = {"phase": "Pending"}
    if scheduled_false:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}, "status": status}


def scheduler_history() -> History:
    """Two load pods created, pod 1 found unschedulable (its status write), pod 0 bound, pod 2 created and bound,
    pod 1 bound after the workload's touch step; pod 2 changed once more after the faults were off (no point)."""
    names = [f"load-0a1b2c3d-{i:05d}" for i in range(3)]
    node = {"metadata": {"name": "n1", "resourceVersion": "5"}, "spec": {}}
    changes = [Change(T0 - 1, "Node", "ADDED", node),
               Change(T0 + 0.1, "Pod", "ADDED", pod(names[0], 10)),
               Change(T0 + 0.2, "Pod", "ADDED", pod(names[1], 11)),
               Change(T0 + 0.5, "Pod", "MODIFIED", pod(names[1], 12, scheduled_false=True)),
               Change(T0 + 1.0, "Pod", "MODIFIED", pod(names[0], 13, node="n1")),
               Change(T0 + 1.1, "Pod", "ADDED", pod(names[2], 14)),
               Change(T0 + 1.2, "Pod", "MODIFIED", pod(names[2], 15, node="n1")),
               Change(T0 + 6.0, "Pod", "MODIFIED", pod(names[1], 16, node="n1")),
               Change(T0 + 9.0, "Pod", "MODIFIED", pod(names[2], 17))]
    return History(list(reversed(changes)), T0 - 1, T0 + 10)  # ordered by resourceVersion, not as delivered


CLEAN_JOURNAL: list[dict[str, Any]] = [{"seq": 1, "time": T0, "event": "activate", "profile": "p", "epoch": 1},
                                       {"seq": 2, "time": T0 + 8, "event": "deactivate", "reason": "api"}]
PHASES = [("load", T0), ("1:touched", T0 + 5.0)]


def scheduler_points() -> list[causal.Point]:
    return causal.points(scheduler_history(), CLEAN_JOURNAL, SCHEDULER, PHASES, until=T0 + 8)


def test_a_schedulers_writes_and_the_events_it_consumed() -> None:
    pts = scheduler_points()
    writes = [(p.match, p.count, p.object, p.phase) for p in pts if p.kind == causal.WRITE]
    assert writes == [("pod-write", 1, f"{NS}/load-0a1b2c3d-00001", "load"),
                      ("binding", 1, f"{NS}/load-0a1b2c3d-00000", "load"),
                      ("binding", 2, f"{NS}/load-0a1b2c3d-00002", "load"),
                      ("binding", 3, f"{NS}/load-0a1b2c3d-00001", "1:touched")]
    events = [(p.match, p.verb, p.names, p.write, p.count, p.before) for p in pts if p.kind == causal.EVENT]
    # each write's own object's last change before it; pod 1's status write event is consumed by its Binding
    assert events == [("pod-watch", "ADDED", "load-*-00001", "pod-write", 1, 0),
                      ("pod-watch", "ADDED", "load-*-00000", "binding", 1, 0),
                      ("pod-watch", "ADDED", "load-*-00002", "binding", 2, 1),
                      ("pod-watch", "MODIFIED", "load-*-00001", "binding", 3, 0)]
    groups = {p.group for p in pts}
    assert groups == {"pods patch/update load", "pods create/binding load", "pods create/binding 1:touched",
                      "watch pods ADDED load", "watch pods MODIFIED load"}


def test_a_reference_the_proxy_perturbed_is_refused() -> None:
    perturbed = [*CLEAN_JOURNAL, {"seq": 3, "time": T0 + 1, "event": "watch-event", "action": "dropped",
                                  "fault": "dropEvents", "rule": "r1", "name": "x", "namespace": NS, "type": "ADDED"}]
    with pytest.raises(causal.ReferenceError, match="shows 1 fault effect"):
        causal.points(scheduler_history(), perturbed, SCHEDULER, PHASES)


def test_a_controllers_writes_are_its_creates_and_status_writes() -> None:
    rs = {"metadata": {"name": "web-7d9", "namespace": NS, "resourceVersion": "20", "uid": "u-web-7d9",
                       "ownerReferences": [{"kind": "Deployment", "name": "web", "uid": "d", "controller": True}]},
          "status": {"replicas": 0}}
    rs2 = {**rs, "metadata": {**rs["metadata"], "resourceVersion": "23"}, "status": {"replicas": 2}}
    history = History([Change(T0, "ReplicaSet", "ADDED", rs),
                       Change(T0 + 1, "Pod", "ADDED", pod("web-7d9-abcde", 21, owner="web-7d9")),
                       Change(T0 + 1, "Pod", "ADDED", pod("web-7d9-fghij", 22, owner="web-7d9")),
                       Change(T0 + 2, "ReplicaSet", "MODIFIED", rs2),
                       Change(T0, "Node", "ADDED", {"metadata": {"name": "n1", "resourceVersion": "19"},
                                                    "status": {"conditions": []}}),
                       Change(T0 + 2, "Node", "MODIFIED", {"metadata": {"name": "n1", "resourceVersion": "24"},
                                                          "status": {"conditions": [{"type": "Ready"}]}})], T0, T0 + 3)
    pts = causal.points(history, [], CONTROLLERS)  # a node's heartbeat is no status write of theirs
    assert [(p.kind, p.match, p.count) for p in pts] == [
        ("write", "replicaset-write", 1), ("write", "pod-create", 1), ("event", "workload-watch", 1),
        ("write", "pod-create", 2), ("write", "status-write", 1)]
    assert pts[1].names == "web-7d9-*" and pts[2].object == f"{NS}/web-7d9"  # the pod's owner: the event it read
    assert pts[2].verb == "ADDED" and pts[2].count == 1  # consumed once, though the second create read it too


def rule_kinds(p: plans.Perturbation) -> list[str]:
    return [fault_kind(r) for r in p.rules]


def test_the_plan_lands_each_perturbation_at_its_point() -> None:
    pts = scheduler_points()
    plan = plans.build(pts, KNOWN_KINDS, SCHEDULER, seed=3, per_group=5)
    assert plan.skipped == [] and plan.perturbations
    assert all(valid(Genome(rules=p.rules)) for p in plan.perturbations)
    second = [p for p in plan.perturbations if p.point == "w2-binding"]
    at_count = [p for p in second if traits(rule_kinds(p)[0]).at_a_count]
    resent = [p for p in second if traits(rule_kinds(p)[0]).acts_on == "resent-write"]
    stale = [p for p in second if traits(rule_kinds(p)[0]).watch_requests == "relist"]
    lost = [p for p in second if traits(rule_kinds(p)[0]).acts_on == "write" and not traits(rule_kinds(p)[0]).at_a_count]
    failed = [p for p in second if traits(rule_kinds(p)[0]).acts_on == "request"]
    assert len(at_count) == len(resent) == len(lost) == 1 and len(second) == 3 + len(stale) + len(failed)
    assert sorted(rule_kinds(p)[0] for p in stale) == ["staleList", "twoViews"]  # a stale view each
    # every kind that fails or holds back any request: that Binding failed before it reached the apiserver, or held
    assert sorted(rule_kinds(p)[0] for p in failed) == sorted(k for k in KNOWN_KINDS if traits(k).acts_on == "request")
    assert all(p.what.startswith("the write held back" if traits(rule_kinds(p)[0]).duration else
                                 "the write failed before it reached the apiserver") for p in failed)
    assert lost[0].what.startswith("the write committed, its answer lost")
    for p in (at_count[0], resent[0], lost[0], *failed):  # the second Binding, once
        [r] = p.rules
        assert r["match"] == BINDING and r["when"] == {"trigger": {"match": BINDING, "count": 2}, "maxInjections": 1}
    for p in stale:
        view, reopen = p.rules
        assert view["match"] == {"verbs": ["watch"], "resources": ["pods"]}
        assert next(iter(view["fault"].values())) == {"lagWrites": 1}  # the write just made is hidden
        assert traits(fault_kind(reopen)).reopens == "relist" and traits(fault_kind(reopen)).at_a_count
        assert reopen["when"]["trigger"] == {"match": BINDING, "count": 2}
    edited = [p for p in plan.perturbations if p.point == "e3-pods"]
    # every kind that edits the events of any watch (one that takes only relists, watchList, cannot act at an event)
    assert {k for p in edited for k in rule_kinds(p)[:1]} == {k for k in KNOWN_KINDS if traits(k).edits_events
                                                              and traits(k).watch_requests == "any"}
    for p in edited:
        rule, reopen = p.rules
        settings = next(iter(rule["fault"].values()))
        if "events" in settings:
            assert settings["events"] == {"types": ["ADDED"], "names": ["load-*-00002"]}
        # just after the one Binding that came before the event: once answered, on the next request of any kind
        assert reopen["when"]["trigger"] == {"match": BINDING, "count": 1, "answered": True}
        assert "match" not in reopen
        assert traits(fault_kind(reopen)).reopens is not None and traits(fault_kind(reopen)).acts_on != "watch"


def test_kinds_not_asked_or_refused_are_left_out_and_said() -> None:
    only_drop = [k for k in KNOWN_KINDS if traits(k).edits_events and not traits(k).duration][:1]
    plan = plans.build(scheduler_points(), only_drop, SCHEDULER, seed=1)
    assert plan.perturbations == []  # an event rule needs a reopen among the asked kinds; none was asked
    assert any("no asked kind lands" in s for s in plan.skipped)
    kcm = plans.build([p for p in causal.points(History([Change(T0, "Pod", "ADDED", pod("w-abcde", 2, owner="w"))]),
                                                [], CONTROLLERS) if p.kind == causal.WRITE],
                      KNOWN_KINDS, CONTROLLERS, seed=1)
    assert kcm.perturbations and not any(traits(k).at_a_count for p in kcm.perturbations for k in rule_kinds(p))
    assert all(p.rules[0]["match"] == POD_CREATE for p in kcm.perturbations if p.rules[0]["match"] != {
        "verbs": ["watch"], "resources": ["pods"]})


def test_points_are_kept_per_group_and_run_round_robin() -> None:
    pts = [causal.Point(f"w{i}", "write", "binding", "pods", "create/binding", "load", i, "", "", i, "binding")
           for i in range(1, 6)]
    pts.append(causal.Point("e1", "event", "pod-watch", "pods", "ADDED", "load", 1, "", "", 0, "binding"))
    order, groups = plans.chosen(pts, 3)
    assert [p.id for p in order] == ["w1", "e1", "w3", "w5"]  # the group's first, middle and last
    assert groups == {"pods create/binding load": ["w1", "w2", "w3", "w4", "w5"], "watch pods ADDED load": ["e1"]}
    assert [p.id for p in plans.chosen(pts, 1)[0]] == ["w1", "e1"]
    with pytest.raises(ValueError, match="at least 1"):
        plans.build(pts, KNOWN_KINDS, SCHEDULER, 1, per_group=0)


def test_with_pod_deletion_asked_a_pods_write_gets_its_pod_deleted_while_the_write_is_held() -> None:
    from kube_fault_proxy.rig.actions import trial_churn

    pts = scheduler_points()
    without = plans.build(pts, KNOWN_KINDS, SCHEDULER, seed=3, per_group=5)
    assert not any(p.churn for p in without.perturbations)  # no --actions: nothing deleted
    plan = plans.build(pts, KNOWN_KINDS, SCHEDULER, seed=3, per_group=5, actions=trial_churn.ACTIONS)
    deleted = [p for p in plan.perturbations if p.churn]
    holders = sorted(k for k in KNOWN_KINDS if traits(k).acts_on == "request" and traits(k).duration)
    assert any("response" in plans._choices(k, "phase") for k in holders)  # one holds the answer
    binding = [p for p in deleted if p.point == "w2-binding"]
    assert sorted(rule_kinds(p)[0] for p in binding) == holders and holders
    for p in deleted:
        [rule], [action] = p.rules, p.churn
        kind = fault_kind(rule)
        assert p.what.startswith(f"the pod deleted while its write is held ({kind}")
        if "response" in plans._choices(kind, "phase"):  # the answer held, not the request: the write commits first
            assert rule["fault"][kind]["phase"] == "response" and p.what.endswith("the answer held after the commit)")
        assert trial_churn.validate(action, "churn[0]") == {"do": "deletePod", "pick": 0, "onFault": kind,
                                                            "of": "faulted"}
        held = rule["fault"][kind].get(traits(kind).duration)
        assert held is None or held >= plans.HOLD_SECONDS  # long enough for the deletion to land in the hold
        assert valid(Genome(rules=p.rules, churn=p.churn))
    assert {p.point for p in deleted} <= {p.id for p in pts if p.kind == causal.WRITE}
    assert [p.as_dict()["churn"] for p in deleted[:1]] == [list(deleted[0].churn)]
    assert "churn" not in without.perturbations[0].as_dict()


def test_a_short_budget_tries_each_effect_once_before_one_effect_twice() -> None:
    from kube_fault_proxy.rig.actions import trial_churn

    pts = [causal.Point(f"w{i}", "write", "binding", "pods", "create/binding", "load", i, "", "", i, "binding")
           for i in (1, 40)]
    pts.append(causal.Point("e1", "event", "pod-watch", "pods", "ADDED", "load", 1, "load-*-00000", "", 0,
                            "binding"))
    plan = plans.build(pts, KNOWN_KINDS, SCHEDULER, seed=1, per_group=2, actions=trial_churn.ACTIONS)
    order = [(p.point, p.effect) for p in plan.perturbations]
    first = order[:order.index(("w40", order[0][1]))]  # everything before the second point of the first group
    assert {point for point, _ in first} == {"w1", "e1"} and first[:2] == [("w1", order[0][1]), ("e1", first[1][1])]
    w1 = [effect for point, effect in first if point == "w1"]
    effects = list(dict.fromkeys(w1))
    assert w1[:len(effects)] == effects  # one of each effect before any effect again
    assert "the pod deleted while its write is held" in effects and len(effects) >= 6
    usable = [k for k in KNOWN_KINDS if k not in SCHEDULER.no_kinds]
    every = [*plans.at_write(pts[0], usable, SCHEDULER, 1, trial_churn.ACTIONS),
             *plans.at_event(pts[2], usable, SCHEDULER, 1),
             *plans.at_write(pts[1], usable, SCHEDULER, 1, trial_churn.ACTIONS)]
    assert sorted(plan.perturbations, key=repr) == sorted(every, key=repr)  # reordered: none lost, none added


def test_coverage_counts_landed_points_and_distinct_end_states() -> None:
    plan = plans.build(scheduler_points(), KNOWN_KINDS, SCHEDULER, seed=3, per_group=5)
    cov = plans.PlanCoverage(plan)
    first = plan.perturbations[0]
    second = next(p for p in plan.perturbations if p.point != first.point)
    cov.add(first, {first.rules[0]["name"]}, {"pods": 3, "pods/bound": 3, "node/n1/pods": 3})
    cov.add(second, {"some-other-rule"}, {"pods": 3, "pods/bound": 2, "node/n1/pods": 2}, broken=["stranded"])
    cov.add(second, set(), {"pods": 3, "pods/bound": 2, "node/n1/pods": 1}, masked=frozenset({"node/n1/pods"}))
    cov.add(second, set(), None)  # an errored trial: no end state
    doc = cov.as_dict()
    assert doc["points"] == len(plan.points) == 8 and doc["pointsCovered"] == 1
    assert doc["pointsRun"] == len({first.point, second.point}) and doc["perturbationsRun"] == 4
    assert doc["perturbationsLanded"] == 1 and doc["distinctEndStates"] == 3
    assert first.point not in doc["uncovered"] and len(doc["uncovered"]) == doc["points"] - 1
    rows = {r["point"]: r for r in doc["byPoint"]}
    assert (rows[second.point]["broke"], rows[second.point]["run"], rows[second.point]["landed"]) == (["stranded"], 3, 0)
    assert (rows[first.point]["broke"], rows[first.point]["run"], rows[first.point]["landed"]) == ([], 1, 1)
    assert rows[first.point]["object"] == f"{NS}/load-0a1b2c3d-00001"  # the pod whose status write it is
    text = "\n".join(plans.lines(doc))
    assert "points covered: 1 of 8 in the plan" in text and "distinct end states reached: 3" in text
    assert f"| {second.point} | {rows[second.point]['group']} | {rows[second.point]['object']} |" in text
    assert text.count("\n| ") == 1 + len(plan.points)  # the head and a row per point


def test_a_reference_run_is_read_back(tmp_path: Path) -> None:
    genome = Genome(rules=(), pods=20, seed=5, shape="roomy")
    doc = planned.reference_doc("yunikorn", genome, scheduler_history(), CLEAN_JOURNAL, PHASES, T0 + 8)
    (tmp_path / planned.REFERENCE).write_text(json.dumps(doc))
    read, pts, _ = planned.read_reference(tmp_path, "yunikorn")
    assert (read.pods, read.seed, read.rules) == (20, 5, ())
    assert pts == scheduler_points()
    with pytest.raises(causal.ReferenceError, match="field 'target' is 'yunikorn'"):
        planned.read_reference(tmp_path, "kube-scheduler")
    (tmp_path / planned.REFERENCE).write_text(json.dumps({**doc, "history": {"changes": []}}))
    with pytest.raises(causal.ReferenceError, match=r"reference.json: not a reference run \(KeyError"):
        planned.read_reference(tmp_path, "yunikorn")
    with pytest.raises(causal.ReferenceError, match="cannot read it"):
        planned.read_reference(tmp_path / "none", "yunikorn")


def settings(tmp_path: Path, *more: str) -> Any:
    return _settings(parser().parse_args(["search", "--target", "yunikorn", "--budget", "5m", "-o", str(tmp_path),
                                          *more]))


def test_the_command_line_takes_plan(tmp_path: Path) -> None:
    s = settings(tmp_path, "--plan")
    assert s.plan and s.plan_from is None and s.plan_per_group == 2 and set(s.kinds) == set(KNOWN_KINDS)
    assert not settings(tmp_path).plan
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / planned.REFERENCE).write_text("{}")
    s = settings(tmp_path, "--plan-from", str(tmp_path / "ref"), "--plan-per-group", "1", "--kinds", "dropEvents")
    assert s.plan and s.plan_from == tmp_path / "ref" and s.plan_per_group == 1 and s.kinds == ("dropEvents",)
    with pytest.raises(UsageError, match=r"no reference\.json there"):
        settings(tmp_path, "--plan-from", str(tmp_path))
    with pytest.raises(UsageError, match="at least 1 point per group"):
        settings(tmp_path, "--plan", "--plan-per-group", "0")


def test_a_planned_search_runs_its_plan_in_order_within_the_trial_cap(tmp_path: Path) -> None:
    from kube_fault_proxy.rig.search.engine import Search
    from kube_fault_proxy.rig.search.outcome import Outcome
    from kube_fault_proxy.rig.search.output import write
    from kube_fault_proxy.rig.search.trial import TrialResult

    ref = tmp_path / "ref"
    ref.mkdir()
    doc = planned.reference_doc("yunikorn", Genome(rules=(), pods=20, seed=5), scheduler_history(), CLEAN_JOURNAL,
                                PHASES, T0 + 8)
    (ref / planned.REFERENCE).write_text(json.dumps(doc))
    s = settings(tmp_path / "out", "--plan-from", str(ref), "--max-trials", "4", "--control", "none")
    search = Search(s, lambda _: None)
    ran: list[tuple[str, Genome]] = []

    def trial(scheduler: str, genome: Genome, name: str, *_: Any) -> TrialResult:  # lands every other one
        ran.append((name, genome))
        fired = {genome.rules[0]["name"]} if len(ran) % 2 else set()
        return TrialResult(name, scheduler, genome, fired=fired, injections=len(fired),
                           end_state={"pods": 20, "pods/bound": 20 - len(ran) % 2})

    search.trial = trial  # type: ignore[method-assign]
    out = Outcome(s)
    s.out.mkdir(parents=True)
    planned.run(search, out)
    plan = json.loads((s.out / planned.PLAN).read_text())
    assert [n for n, _ in ran] == ["p0", "p1", "p2", "p3"]  # the trial cap
    assert [g.rules for _, g in ran] == [tuple(p["rules"]) for p in plan["perturbations"][:4]]
    assert all(g.pods == 20 and g.seed == 5 and g.origin.startswith("plan:") for _, g in ran)
    assert out.plan is not None and out.plan["perturbationsRun"] == 4 and out.plan["perturbationsLanded"] == 2
    assert out.plan["distinctEndStates"] == 2 and len(out.trials) == 4
    assert (s.out / planned.REFERENCE).is_file()  # the reference a later --plan-from may read
    assert search.step == "p"  # its hits, replays and controls are named p12, p12-replay, p12-control
    report = write(out, ["search"]).read_text()
    assert "## The plan" in report and f"points covered: {out.plan['pointsCovered']} of" in report


def test_a_planned_search_without_a_reference_says_why(tmp_path: Path) -> None:
    from kube_fault_proxy.rig.search.engine import Search
    from kube_fault_proxy.rig.search.outcome import Outcome

    ref = tmp_path / "ref"
    ref.mkdir()
    (ref / planned.REFERENCE).write_text(json.dumps({"target": "yunikorn"}))
    s = settings(tmp_path / "out", "--plan-from", str(ref))
    out = Outcome(s)
    planned.run(Search(s, lambda _: None), out)
    assert out.plan is None and out.plan_error is not None and "not a reference run (KeyError" in out.plan_error


def test_a_continued_planned_search_takes_its_own_reference_again(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from kube_fault_proxy.rig.search import resume
    from kube_fault_proxy.rig.search.engine import Search
    from kube_fault_proxy.rig.search.outcome import Outcome
    from kube_fault_proxy.rig.search.trial import TrialResult

    s = settings(tmp_path / "out", "--plan", "--max-trials", "1")
    s.out.mkdir(parents=True)
    doc = planned.reference_doc("yunikorn", Genome(rules=(), pods=20, seed=5), scheduler_history(), CLEAN_JOURNAL,
                                PHASES, T0 + 8)
    (s.out / planned.REFERENCE).write_text(json.dumps(doc))

    def record(_: Any) -> Any:
        raise AssertionError("a continued search records no new reference run")

    monkeypatch.setattr(planned, "record_reference", record)
    search = Search(s, lambda _: None)
    search.records = resume.Records([{"name": "p0", "digest": "x", "scheduler": "yunikorn"}])
    search.trial = lambda sched, g, name, *_: TrialResult(name, sched, g)  # type: ignore[method-assign]
    out = Outcome(s)
    planned.run(search, out)
    assert out.plan is not None and out.plan["perturbationsRun"] == 1 and out.plan["pointsSeen"] == 8
    search.records = resume.Records([])  # a fresh start (or --fresh) records one
    with pytest.raises(AssertionError, match="records no new reference"):
        planned.run(search, Outcome(s))


def test_a_recorded_trial_keeps_its_journal_and_marks_its_phases() -> None:
    from types import SimpleNamespace

    from kube_fault_proxy.rig.search.trial import TrialResult, read_journal

    records = [{"seq": 7, "time": T0 + 1, "event": "activate", "profile": "p", "epoch": 1}]
    control = SimpleNamespace(journal_after=lambda since: SimpleNamespace(next=since + 1, records=records))
    kept, plain = (TrialResult("ref", "yunikorn", Genome(rules=()), journal=j) for j in ([], None))
    for result in (kept, plain):
        read_journal(SimpleNamespace(cursor=6), control, result, NS, T0, {})  # type: ignore[arg-type]
    assert kept.journal == records and plain.journal is None
    kept.steps = [{"t": 4.0, "did": "touched 20 pods"}, {"t": 6.5, "did": "deleted 3 pods"}, {"t": 7.0}]
    kept.mark_phases(T0, T0 + 8)
    assert kept.phases == [("load", T0), ("1:touched", T0 + 4.0), ("2:deleted", T0 + 6.5)]
    assert kept.faults_end == T0 + 8


DATA = Path(__file__).parent / "data"


def test_a_captured_kube_scheduler_reference_gives_its_bindings_and_their_events() -> None:
    """tests/unit/data/search-plan-reference.json: the reference run of `search --target kube-scheduler --plan
    --pods 20 --nodes 4` (2026-12-06, kube-scheduler v1.38.0-beta.0), its objects cut to the fields the plan reads."""
    genome, pts, _ = planned.read_reference_file(DATA / "search-plan-reference.json", "kube-scheduler")
    assert (genome.pods, genome.shape, genome.action) == (20, "roomy", None)
    bindings = [p for p in pts if p.kind == causal.WRITE]
    assert [p.count for p in bindings] == list(range(1, 21)) and {p.match for p in bindings} == {"binding"}
    assert len({p.names for p in bindings}) == 20  # twenty pods, each bound once
    events = [p for p in pts if p.kind == causal.EVENT]
    assert len(events) == 20 and {(p.verb, p.match) for p in events} == {("ADDED", "pod-watch")}
    assert all(e.names == w.names for e, w in zip(events, bindings, strict=True))  # each pod's ADDED, then its bind
    plan = plans.build(pts, KNOWN_KINDS, SCHEDULER, seed=1, per_group=2)
    assert [p.id for p in plan.points] == ["w1-binding", "e1-pods", "w20-binding", "e20-pods"]
    # at each of the 2 Bindings 10 (a crash after it, committed after its error, committed with its answer lost, 5 that
    # fail or hold it back, 2 stale views); at each of the 2 events 5 (each kind that edits a watch's events)
    assert len(plan.perturbations) == 30 and plan.skipped == []
    assert all(valid(Genome(rules=p.rules)) for p in plan.perturbations)


def test_a_recorded_controllers_history_gives_their_writes_by_resource() -> None:
    import gzip

    history = History.from_dict(json.loads(gzip.decompress((DATA / "controllers-history-clean.json.gz").read_bytes())))
    pts = causal.points(history, [], CONTROLLERS)
    writes = {p.match for p in pts if p.kind == causal.WRITE}
    assert writes == {"status-write", "pod-create", "pod-delete", "replicaset-write"}
    groups = {p.group for p in pts}
    assert {"replicasets update/patch/status load", "deployments update/patch/status load", "pods create load",
            "pods delete load"} <= groups
    assert not any(g.startswith("nodes ") for g in groups)  # a node's status is no controller's write
    plan = plans.build(pts, KNOWN_KINDS, CONTROLLERS, seed=1, per_group=1)
    assert len(plan.points) == len(groups) and plan.skipped == []
    assert not any(traits(fault_kind(r)).at_a_count for p in plan.perturbations for r in p.rules)  # refused here
