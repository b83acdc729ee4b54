"""The ledger (what the proxy's journal says its faults did) and the excuses it gives: journals written by the real
Journal with the records the proxy writes, histories written by hand (and one recorded), judged end to end."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.proxy.requests.watch import WatchEvent
from kube_fault_proxy.rig.controllers.promises import judge as promises
from kube_fault_proxy.rig.invariants import excuses, ledger
from kube_fault_proxy.rig.invariants.history import Change, History
from kube_fault_proxy.rig.invariants.ledger import LedgerError
from kube_fault_proxy.rig.search.excused import judge_trial
from kube_fault_proxy.rig.search.genome import Genome
from kube_fault_proxy.rig.search.hit import Hit
from kube_fault_proxy.rig.search.outcome import Outcome, Settings
from kube_fault_proxy.rig.search.output import write

from tests.support.journal import SCHEDULER, JournalWriter
from tests.unit.test_controller_promises import RACE, Story

Obj = dict[str, Any]


class Run:
    """A hand-written history and the journal the proxy wrote beside it, on one clock (the story's)."""

    def __init__(self, tmp_path: Path) -> None:
        self.story = Story()
        self.journal = JournalWriter(tmp_path / "journal.jsonl", lambda: self.story.t)
        self.path = tmp_path / "journal.jsonl"

    def ledger(self) -> ledger.Ledger:
        return ledger.read_file(self.path)

    def judged(self, faults_end: float | None = None, bound: float = excuses.SYNC_BOUND) -> excuses.Judgement:
        history = self.story.history()
        found = [v.as_dict() for v in promises(history, faults_end, 600)]
        return excuses.judge([v for v in found if v["invariant"] != "workload-converges"], self.ledger(), history,
                             faults_end, bound)


def scaled_with_a_lost_answer(run: Run) -> tuple[Obj, Obj]:
    """A ReplicaSet of 3 with two pods; the third pod's create commits but its answer is lost (commitThenFail),
    so the controller creates it again: 4 live pods, one over. Returns the ReplicaSet and the duplicate."""
    s = run.story
    rs = s.workload("ReplicaSet", "web", {"replicas": 3}, observedGeneration=1)
    s.pod(rs, "web-a")
    s.pod(rs, "web-b")
    lost = s.pod(rs, "web-c")
    run.journal.lost_create("lost-answer", lost)
    return rs, s.pod(rs, "web-d")


def test_a_lost_answer_duplicate_removed_by_the_controller_is_excused(tmp_path: Path) -> None:
    run = Run(tmp_path)
    _, dup = scaled_with_a_lost_answer(run)
    run.story.set("Pod", dup, "metadata.deletionTimestamp", "now")  # the controller's next sync removes it
    judged = run.judged()
    [e] = judged.excuses
    assert (e.invariant, e.excused, judged.fully_excused) == ("replicaset-never-over-replicas", True, True)
    assert "ReplicaSet w/web: at most 1 surplus pod" in e.why and "1 pod create committed unanswered (w/web-c" in e.why


def test_two_surplus_pods_after_one_lost_answer_are_not_excused(tmp_path: Path) -> None:
    run = Run(tmp_path)
    rs, dup = scaled_with_a_lost_answer(run)
    twin = run.story.pod(rs, "web-e")
    for p in (dup, twin):
        run.story.set("Pod", p, "metadata.deletionTimestamp", "now")
    judged = run.judged()
    [e] = judged.findings
    assert not judged.fully_excused and judged.excused == []
    assert "ReplicaSet w/web: 2 surplus pods" in e.why and "the ledger excuses 1" in e.why and "1 not excused" in e.why
    assert judged.text().startswith("not excused: ReplicaSet w/web: 2 surplus pods")


def test_a_surplus_never_removed_is_not_excused(tmp_path: Path) -> None:
    run = Run(tmp_path)
    scaled_with_a_lost_answer(run)
    [e] = run.judged().findings
    assert "excused by 1 pod create committed unanswered" in e.why and "never removed" in e.why


def test_a_surplus_ends_when_its_owner_is_deleted(tmp_path: Path) -> None:
    run = Run(tmp_path)
    rs, _ = scaled_with_a_lost_answer(run)
    run.story.delete("ReplicaSet", rs)  # the garbage collector takes its pods after: the surplus is gone with it
    assert run.judged().fully_excused


def test_a_surplus_removed_after_the_bound_is_not_excused(tmp_path: Path) -> None:
    run = Run(tmp_path)
    _, dup = scaled_with_a_lost_answer(run)
    run.story.t += 40  # the story's clock: the next change lands 41 s after the duplicate
    run.story.set("Pod", dup, "metadata.deletionTimestamp", "now")
    assert "removed only 41.0s later, past the bound" in run.judged(faults_end=run.story.t - 60).findings[0].why
    # The bound runs from the faults' end when that is later: the same removal, faults over 20 s before it.
    assert run.judged(faults_end=run.story.t - 20).fully_excused


def test_a_surplus_with_no_lost_answer_is_not_excused(tmp_path: Path) -> None:
    run = Run(tmp_path)
    s = run.story
    rs = s.workload("ReplicaSet", "web", {"replicas": 1}, observedGeneration=1)
    s.pod(rs, "web-a")
    dup = s.pod(rs, "web-b")
    run.journal.lost_create("lost-answer", s.pod(s.workload("ReplicaSet", "other", {"replicas": 1}), "other-a"))
    s.set("Pod", dup, "metadata.deletionTimestamp", "now")
    [e] = run.judged().findings  # another owner's lost answer excuses nothing here
    assert "ReplicaSet w/web: 1 surplus pod from" in e.why and "the ledger excuses 0" in e.why


def test_a_jobs_extra_success_is_excused_by_its_lost_create_only(tmp_path: Path) -> None:
    run = Run(tmp_path)
    s = run.story
    job = s.workload("Job", "batch", {"completions": 2, "parallelism": 3})
    pods = [s.pod(job, f"batch-{i}") for i in range(3)]
    run.journal.lost_create("lost-answer", pods[1])
    for p in pods:
        s.set("Pod", p, "status.phase", "Succeeded")
    judged = run.judged()
    assert [(e.invariant, e.excused) for e in judged.excuses] == [("job-never-over-completions", True)]
    assert "Job w/batch: 1 extra succeeded pod, within 1 pod create committed unanswered" in judged.excuses[0].why


def test_two_extra_successes_after_one_lost_create_are_not_excused(tmp_path: Path) -> None:
    run = Run(tmp_path)
    s = run.story
    job = s.workload("Job", "batch", {"completions": 1, "parallelism": 3})
    pods = [s.pod(job, f"batch-{i}") for i in range(3)]
    run.journal.lost_create("lost-answer", pods[0])
    for p in pods:
        s.set("Pod", p, "status.phase", "Succeeded")
    [e] = run.judged().findings
    assert e.why.startswith("Job w/batch: 2 extra succeeded pods; the ledger excuses 1") and "1 not excused" in e.why


@pytest.mark.parametrize(("lost_index", "excused"), [(1, True), (0, False)])
def test_an_indexed_jobs_twin_success_is_excused_by_a_lost_create_of_that_index(
        tmp_path: Path, lost_index: int, excused: bool) -> None:
    run = Run(tmp_path)
    s = run.story
    job = s.workload("Job", "idx", {"completions": 2, "parallelism": 2, "completionMode": "Indexed"})
    index = "batch.kubernetes.io/job-completion-index"
    pods = [s.pod(job, f"idx-{i}-{n}", annotations={index: str(i)}) for i, n in ((0, "a"), (1, "a"), (1, "b"))]
    run.journal.lost_create("lost-answer", pods[lost_index])
    for p in pods:
        s.set("Pod", p, "status.phase", "Succeeded")
    judged = run.judged()
    twins = [e for e in judged.excuses if e.invariant == "indexed-job-one-success-per-index"]
    assert [e.excused for e in twins] == [excused]
    assert twins[0].why.startswith("Job w/idx index 1: 1 extra succeeded pod" + (
        ", within 1 pod create committed unanswered (w/idx-1-a" if excused else "; the ledger excuses 0"))


def test_a_dropped_added_stranding_is_excused_through_the_ledger(tmp_path: Path) -> None:
    """own_effect's case, now a ledger rule: the scheduler's pod watch lost load-3's ADDED; load-3 stranded."""
    run = Run(tmp_path)
    run.journal.inject("drop", {"dropEvents": {"events": {"types": ["ADDED"]}}}, "WATCH", "/api/v1/pods",
                       agent=SCHEDULER)
    event = WatchEvent("ADDED", "Pod", "s-t1-1", "load-3", "812", False)
    run.journal.watch_event("drop", "dropped", event)
    book = run.ledger()
    [dropped] = book.of("event-dropped")
    assert (dropped.verb, dropped.touched.resource, dropped.touched.show()) == ("ADDED", "pods", "pods s-t1-1/load-3")
    stranded = {"invariant": "stranded", "message": "m", "objects": ["s-t1-1/load-3"]}
    judged = excuses.judge([stranded], book)
    assert judged.fully_excused and "dropped the ADDED watch event of s-t1-1/load-3" in judged.text()
    assert not excuses.judge([stranded], book, reannounced=True).fully_excused  # touchPods re-announced it
    other = {**stranded, "objects": ["s-t1-1/load-9"]}
    assert not excuses.judge([stranded, other], book).fully_excused  # load-9 lost no event: a finding
    phantom = {"invariant": "I2", "message": "m", "objects": ["s-t1-1/load-3"]}
    assert excuses.judge([stranded, phantom], book).findings[0].why == "I2: no ledger effect excuses it"


def test_a_probe_whose_added_was_dropped_excuses_scheduler_not_stuck(tmp_path: Path) -> None:
    """A gang trial's probe is created after the faults, but a watch a rule edited stays edited: its ADDED was
    dropped (the 2026-12-06 gang search, trial 1), so the scheduler never learned of it. A probe the ledger has no
    dropped event for is still a finding."""
    run = Run(tmp_path)
    run.journal.inject("drop", {"dropEvents": {"events": {"hasNodeName": False}}}, "WATCH", "/api/v1/pods",
                       agent=SCHEDULER)
    run.journal.watch_event("drop", "dropped", WatchEvent("ADDED", "Pod", "s-t1-3", "probe-1a2b3c", "900", False))
    stuck = {"invariant": "scheduler-not-stuck", "message": "probe pod s-t1-3/probe-1a2b3c, which fits, was never "
             "bound (bound 30s)", "objects": ["s-t1-3/probe-1a2b3c"]}
    judged = excuses.judge([stuck], run.ledger())
    assert judged.fully_excused and "dropped the ADDED watch event of s-t1-3/probe-1a2b3c" in judged.text()
    assert not excuses.judge([{**stuck, "objects": ["s-t1-3/probe-ffffff"]}], run.ledger()).fully_excused


def node_lost(run: Run, name: str = "n3", revision: str = "700") -> None:
    """The scheduler's node watch (opened now) loses node `name`'s ADDED, one second later."""
    run.journal.inject("nodes", {"dropEvents": {"events": {"types": ["ADDED"]}}}, "WATCH", "/api/v1/nodes",
                       agent=SCHEDULER)
    run.story.t += 1
    run.journal.watch_event("nodes", "dropped", WatchEvent("ADDED", "Node", "", name, revision, False))


def stranded_on(room: dict[str, str], at: float, pod: str = "s-t1-1/load-3") -> dict[str, Any]:
    """`stranded` as check_generic writes it: the nodes with room, their resourceVersions, the check's moment."""
    return {"invariant": "stranded", "message": "m", "objects": [pod], "numbers": {"checkedAt": at}, "room": room}


def test_a_pod_that_fits_only_on_a_node_whose_added_was_dropped_is_excused(tmp_path: Path) -> None:
    """The 2026-12-04 async campaign's `stranded` group: the scheduler's node watch lost a node's ADDED, so a pod
    that fits only there stays Pending. Excused while nothing announced the node again; touchPods re-announces
    pods, not nodes."""
    run = Run(tmp_path)
    node_lost(run)
    book = run.ledger()
    [dropped] = book.of("event-dropped")
    assert (dropped.touched.show(), dropped.revision, dropped.opened) == ("nodes n3", "700", 1000.0)
    judged = excuses.judge([stranded_on({"n3": "700"}, 1060.0)], book)
    assert judged.fully_excused
    assert judged.text().startswith("excused: s-t1-1/load-3: every node with room for it (n3) lost its ADDED "
                                    "watch event to the proxy (dropEvents) and nothing announced it again (node "
                                    "n3's ADDED dropped at 0.0s;")
    assert excuses.judge([stranded_on({"n3": "700"}, 1060.0)], book, reannounced=True).fully_excused


@pytest.mark.parametrize(("room", "at", "then", "says"), [
    ({"n3": "700", "n1": "650"}, 1060.0, None, "node n1 lost no ADDED event in the ledger"),  # it fits elsewhere
    ({"n3": "702"}, 1060.0, None, "the node changed since (702 at the check): its next event announces it"),
    ({"n3": ""}, 1060.0, None, "no resourceVersion says whether it changed since"),
    ({"n3": "700"}, 1300.0, None, "on a watch open 300s by the check, past client-go's shortest (300s)"),
    ({"n3": "700"}, 1060.0, "upstream-lost", "then a connection cut at 1.0s: the scheduler may have listed"),
    ({"n3": "700"}, 1060.0, "outage-start", "then an outage at 1.0s"),
    ({}, 1060.0, None, "with no dropped ADDED event of the pod in the ledger"),  # an old violation: no room named
])
def test_a_node_stranding_the_journal_does_not_prove_is_not_excused(
        tmp_path: Path, room: dict[str, str], at: float, then: str | None, says: str) -> None:
    run = Run(tmp_path)
    node_lost(run)
    if then is not None:  # a relist may follow: the node is listed again
        run.story.t += 1
        run.journal.journal.append(then, reason="reset", client="127.0.0.1:5000", seconds=2.0)
    judged = excuses.judge([stranded_on(room, at)], run.ledger())
    assert not judged.fully_excused and says in judged.text(), judged.text()


def test_a_node_drop_excuses_only_stranded(tmp_path: Path) -> None:
    """Only `stranded` names the nodes with room: a pod that waited past its bound, or a stuck probe, is not
    excused by a node the scheduler never learned of."""
    run = Run(tmp_path)
    node_lost(run)
    waited = {**stranded_on({"n3": "700"}, 1060.0), "invariant": "no-pod-waits-past-bound"}
    judged = excuses.judge([waited], run.ledger())
    assert not judged.fully_excused and "no dropped ADDED event of the pod" in judged.text()


def overcommitted(requested: float, smallest: float = 0.5, pods: tuple[str, ...] = ("a", "b", "c")) -> dict[str, Any]:
    """no-overcommit of node n1's cpu (allocatable 1), as safety.overcommit writes it."""
    return {"invariant": "no-overcommit", "message": "m", "objects": [f"s-t1-1/{p}" for p in pods], "kind": "cpu",
            "node": "n1", "numbers": {"requested": requested, "allocatable": 1.0, "pods": len(pods),
                                      "smallest": smallest}}


def test_an_overcommit_within_the_room_of_binds_committed_after_their_error_is_excused(tmp_path: Path) -> None:
    """The 1.38 gang search (t12, t23; gate on and off): failThenCommit on Bindings made kube-scheduler forget pods
    that were bound, and place others in their room. Each such Binding of a pod on the node excuses its room."""
    run = Run(tmp_path)
    run.journal.inject("lost", {"commitThenFail": {"abort": {"status": 504}}}, "POST",
                       "/api/v1/namespaces/s-t1-1/pods/a/binding", agent=SCHEDULER, upstreamStatus=201)
    late = run.journal.inject("late", {"failThenCommit": {"status": 504, "commitAfterSeconds": 0.5}}, "POST",
                              "/api/v1/namespaces/s-t1-1/pods/b/binding", agent=SCHEDULER)
    run.journal.journal.append("late-commit", **{k: late[k] for k in ("profile", "epoch", "seed", "rule", "fault")},
                               request=late["request"], committed=True, status=201, afterSeconds=0.5)
    book = run.ledger()
    assert [(e.kind, e.verb, e.touched.name) for e in book.effects] == [
        ("committed-unanswered", "create/binding", "a"), ("committed-after-error", "create/binding", "b")]
    judged = excuses.judge([overcommitted(2.0)], book)  # 1 cpu over: a's and b's room (0.5 each, at least)
    assert judged.fully_excused and "within the room of 2 pods whose Binding committed" in judged.text()
    over = excuses.judge([overcommitted(2.5)], book)
    assert not over.fully_excused and "excuses at most 1 (2 Bindings committed while" in over.text()
    assert over.text().endswith("s-t1-1/a, s-t1-1/b); 0.5 not excused")
    elsewhere = excuses.judge([overcommitted(1.5, pods=("c", "d"))], book)  # the lost binds' pods are not on n1
    assert not elsewhere.fully_excused and "no Binding of its pods committed" in elsewhere.text()


def test_a_dropped_modified_excuses_no_stranding(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.journal.inject("drop", {"dropEvents": {}}, "WATCH", "/api/v1/pods", agent=SCHEDULER)
    run.journal.watch_event("drop", "dropped", WatchEvent("MODIFIED", "Pod", "s-t1-1", "load-3", "812", False))
    stranded = {"invariant": "stranded", "message": "m", "objects": ["s-t1-1/load-3"]}
    assert not excuses.judge([stranded], run.ledger()).fully_excused


def test_the_recorded_race_with_a_lost_answer_twin(tmp_path: Path) -> None:
    """The real recorded history (gate matrix, 2026-12-06) with a twin pod joining after the controller settled,
    and a journal saying its first create's answer was lost: a finding while the twin stays, excused once the
    controller removes it."""
    h = History.from_dict(json.loads(gzip.decompress(RACE.read_bytes())))
    last = max((c for c in h.ordered() if c.kind == "Pod"), key=lambda c: c.revision)
    meta = {**last.obj["metadata"], "name": "rs-twin", "uid": "twin-uid", "resourceVersion": "999999"}
    twin = Change(h.end - 5, "Pod", "ADDED", {**last.obj, "metadata": meta})
    h.changes.append(twin)
    clock = [h.end - 6]
    writer = JournalWriter(tmp_path / "journal.jsonl", lambda: clock[0])
    writer.lost_create("lost-answer", last.obj)  # the pod the twin duplicates: its create committed unanswered
    book = ledger.read_file(tmp_path / "journal.jsonl")
    found = [v.as_dict() for v in promises(h, h.start, 60) if v.invariant == "replicaset-never-over-replicas"]
    [kept] = excuses.judge(found, book, h).findings
    assert "never removed" in kept.why
    gone = {**meta, "resourceVersion": "1000000", "deletionTimestamp": "now"}
    h.changes.append(Change(h.end - 2, "Pod", "MODIFIED", {**last.obj, "metadata": gone}))
    assert excuses.judge(found, book, h).fully_excused


# --- the ledger itself: what each journal record becomes


def test_each_record_becomes_its_effect(tmp_path: Path) -> None:
    run = Run(tmp_path)
    j = run.journal
    j.inject("a", {"abort": {"status": 500}}, "DELETE", "/api/v1/namespaces/w/pods/web-a")
    j.inject("d", {"delay": {"seconds": 1}}, "POST", "/api/v1/namespaces/w/pods")  # forwarded: no effect
    j.inject("s", {"staleList": {"lagWrites": 3}}, "GET", "/apis/apps/v1/namespaces/w/replicasets",
             servedResourceVersion="40", seenSecondsAgo=1.2, writesSince=3)
    j.inject("f", {"failThenCommit": {"commitAfterSeconds": 2, "status": 504}}, "POST", "/api/v1/namespaces/w/pods")
    j.journal.append("late-commit", **j.stamp("f", "failThenCommit"), request={"verb": "create", "resource": "pods",
                                                                                "namespace": "w", "name": ""},
                     afterSeconds=2.0, committed=True, upstreamStatus=201, resourceVersion="90",
                     written={"name": "web-z", "namespace": "w", "owner": {"kind": "ReplicaSet", "name": "web",
                                                                            "uid": "u1"}})
    j.inject("h", {"holdEvents": {"maxSeconds": 3}}, "WATCH", "/apis/apps/v1/replicasets")
    j.watch_event("h", "held", None, fault="holdEvents", reason="time", events=4, heldSeconds=3.0)
    j.watch_event("h", "delay-cap", None, fault="holdEvents", held=5, released=1)
    j.journal.append("outage-start", seconds=2.0, refuse="reset", rule="o")
    j.journal.append("upstream-lost", reason="reset", client="127.0.0.1:5000")
    j.journal.append("activate", profile="p", epoch=1)
    book = run.ledger()
    assert [e.kind for e in book.effects] == ["failed-before-apiserver", "stale-served", "committed-after-error",
                                              "events-held", "outage", "connection-cut"]
    failed, stale, late, held, outage, _ = book.effects
    assert (failed.verb, failed.touched.show()) == ("delete", "pods w/web-a")
    assert stale.touched.resource == "replicasets" and stale.fault == "staleList"
    assert late.touched.show() == "pods w/web-z of ReplicaSet web" and late.touched.owner_uid == "u1"
    assert (held.touched.resource, held.events, held.seconds) == ("replicasets", 4, 3.0)
    assert outage.seconds == 2.0
    assert book.counts() == {"failed-before-apiserver": 1, "committed-after-error": 1, "events-held": 1,
                             "stale-served": 1, "connection-cut": 1, "outage": 1}


def test_a_commit_then_fail_that_committed_nothing_is_no_effect(tmp_path: Path) -> None:
    run = Run(tmp_path)
    run.journal.inject("c", {"commitThenFail": {"abort": {"status": 504}}}, "POST", "/api/v1/namespaces/w/pods",
                       upstreamStatus=409)
    assert run.ledger().effects == ()


@pytest.mark.parametrize(("line", "says"), [
    ('{"seq":1,"time":5.0,"event":"inject","request":{"verb":"create"}}', ":1: field 'fault' is None"),
    ('{"seq":1,"time":"soon","event":"inject","fault":"abort","request":{"verb":"create"},"action":"respond 500"}',
     ":1: field 'time' is 'soon', not a number"),
    ('{"seq":1,"time":5.0,"event":"inject","fault":"abort","request":"POST"}', ":1: field 'request' is 'POST'"),
    ("[1]", ":1: a journal record is a JSON object, not list"),
    ("{not json", ":1: not a JSON record"),
])
def test_a_bad_record_is_named_by_file_line_and_field(tmp_path: Path, line: str, says: str) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_text('{"seq":0,"time":1.0,"event":"proxy-start"}\n\n' + line + "\n")
    with pytest.raises(LedgerError) as e:
        ledger.read_file(path)
    assert str(e.value).startswith(f"{path}:3") and says.removeprefix(":1") in str(e.value)


# --- the search: a trial judged against its ledger, and the precision figure


def test_a_controller_trial_is_the_faults_effect_only_when_every_break_is_excused(tmp_path: Path) -> None:
    run = Run(tmp_path)
    rs, dup = scaled_with_a_lost_answer(run)
    run.story.set("Pod", dup, "metadata.deletionTimestamp", "now")
    history = run.story.history()
    check = {"violations": [v.as_dict() for v in promises(history, None, 600)]}
    why, said = judge_trial(check, run.ledger(), None, history, None, history.start)
    assert why == said and why is not None and why.startswith("excused: ReplicaSet w/web: at most 1 surplus pod")
    twin = run.story.pod(rs, "web-e")  # a second surplus pod with no lost answer of its own
    run.story.set("Pod", twin, "metadata.deletionTimestamp", "now")
    history = run.story.history()
    check = {"violations": [v.as_dict() for v in promises(history, None, 600)]}
    why, said = judge_trial(check, run.ledger(), None, history, None, history.start)
    assert why is None and said == "not excused: ReplicaSet w/web: 1 surplus pod from 7.0s; the ledger excuses 0 " \
        "(1 pod create committed unanswered (w/web-c at 4.0s), 1 of them spent on an earlier surplus); 1 not excused"
    assert judge_trial({"violations": []}, run.ledger(), None, history) == (None, None)


def test_the_report_accounts_for_every_hit(tmp_path: Path) -> None:
    g = Genome(rules=({"name": "r1", "match": {"verbs": ["create"], "resources": ["pods"]},
                       "fault": {"commitThenFail": {"abort": {"status": 504}}}},), pods=20, seed=4)
    hits = [Hit(1, g, ["I3"], verdict="excused", known="excused: the proxy dropped the ADDED watch event of a/b"),
            Hit(2, g, ["stranded"], ["stranded"], ["stranded"], "control-broken"),
            Hit(3, g, ["stranded"], [], verdict="not-reproduced"),
            Hit(4, g, ["replicaset-never-over-replicas"], ["replicaset-never-over-replicas"], [], "confirmed",
                ledger="not excused: ReplicaSet s/rs: 2 surplus pods from 3.0s; the ledger excuses 1")]
    out = Outcome(Settings(scheduler="yunikorn", control="kube-scheduler", budget=60, seed=1, kinds=("abort",),
                           out=tmp_path, state_dir=tmp_path, profiles_dir=tmp_path), hits=hits)
    report = write(out, ["search"]).read_text()
    assert "- 4 hits: **1 excused by the ledger** (the fault's own effect, read from the proxy's journal); 1 the " \
           "faults' effect (the control broke the same); 1 did not repeat on replay; 0 with nothing injected; " \
           "0 known bugs; 0 not yet confirmed; **1 confirmed** (25% of the hits), 0 distinct findings" in report
    assert "| 4 | replicaset-never-over-replicas | replicaset-never-over-replicas | clean | confirmed | not " \
           "excused: ReplicaSet s/rs: 2 surplus pods from 3.0s; the ledger excuses 1 |" in report
    assert "| excused | excused: the proxy dropped the ADDED watch event of a/b |" in report
    doc = json.loads((tmp_path / "search.json").read_text())
    assert doc["precision"] == {"hits": 4, "excusedByLedger": 1, "faultsEffect": 1, "didNotRepeat": 1,
                                "noInjection": 0, "known": 0, "confirmed": 1, "unconfirmed": 0, "findings": 0,
                                "findingReplays": [], "controlRunsPerHit": 3}
    assert doc["hits"][3]["ledger"].startswith("not excused: ReplicaSet s/rs")


RECORDS = Path(__file__).parents[2] / "docs" / "records" / "bug-reports"


def test_a_recorded_journal_of_lost_binding_answers_excuses_no_bug(tmp_path: Path) -> None:
    """The journal of the committed-Binding finding (kubernetes#139602, 2026-12-05, gate on), as serve wrote it:
    two Bindings committed unanswered. The ledger names both pods; PodScheduled=False on a bound pod is the bug
    itself, and no lost answer excuses it."""
    text = (RECORDS / "kube-scheduler-committed-bind-pod-scheduled-false" / "journal-gate-on.txt").read_text()
    path = tmp_path / "journal.jsonl"
    path.write_text("\n".join(line for line in text.splitlines() if line.startswith("{")) + "\n")
    book = ledger.read_file(path)
    assert [(e.kind, e.verb, e.touched.show()) for e in book.effects] == [
        ("committed-unanswered", "create/binding", "pods default/pod-real"),
        ("committed-unanswered", "create/binding", "pods default/pod-kwok")]
    assert book.of("committed-unanswered", resource="pods", verb="create") == []  # no pod create among them
    bug = {"invariant": "bound-pod-scheduled", "message": "m", "objects": ["default/pod-real"]}
    assert excuses.judge([bug], book).findings[0].why == "bound-pod-scheduled: no ledger effect excuses it"


def test_the_text_shows_two_reasons_an_invariant_and_counts_the_rest(tmp_path: Path) -> None:
    """A trial whose dropped ADDED events stranded 90 pods said so 90 times in the report's ledger column."""
    run = Run(tmp_path)
    run.journal.inject("drop", {"dropEvents": {}}, "WATCH", "/api/v1/pods", agent=SCHEDULER)
    for i in range(5):
        run.journal.watch_event("drop", "dropped", WatchEvent("ADDED", "Pod", "s-t1-1", f"load-{i}", str(800 + i),
                                                              False))
    stranded = [{"invariant": "stranded", "message": "m", "objects": [f"s-t1-1/load-{i}"]} for i in range(5)]
    stuck = {"invariant": "scheduler-not-stuck", "message": "m", "objects": ["s-t1-1/probe-1"]}
    judged = excuses.judge([*stranded, stuck, stuck], run.ledger())
    assert judged.text().split("; ") == [
        "excused: the proxy dropped the ADDED watch event of s-t1-1/load-0 (dropEvents) and nothing re-announced "
        "it: the scheduler never learned of the pod",
        "excused: the proxy dropped the ADDED watch event of s-t1-1/load-1 (dropEvents) and nothing re-announced "
        "it: the scheduler never learned of the pod",
        "excused: 3 more stranded like these",
        "not excused: s-t1-1/probe-1: scheduler-not-stuck with no dropped ADDED event of the pod in the ledger"]
    assert len(judged.excuses) == 7  # every one kept, only the text is short
