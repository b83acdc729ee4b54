"""`check --namespace`: the scheduler invariants per namespace, merged; the workload promises beside them;
`check --journal`: what the proxy's journal excuses, apart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kube_fault_proxy.cli import workload
from kube_fault_proxy.cli.main import parser
from kube_fault_proxy.cli.workload import judged
from kube_fault_proxy.proxy.requests.watch import WatchEvent
from kube_fault_proxy.rig.invariants import ledger
from kube_fault_proxy.rig.invariants.catalogue import Violation
from kube_fault_proxy.rig.invariants.check import Snapshot, verdict_line
from kube_fault_proxy.rig.invariants.excuses import excuse_report

from tests.support.journal import SCHEDULER, JournalWriter


def pending(name: str, namespace: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": name, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"schedulerName": "nobody", "containers": [{"resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Pending"}}


NODE = {"metadata": {"name": "n1"}, "spec": {}, "status": {"allocatable": {"cpu": "4", "memory": "1Gi", "pods": "10"}}}


def test_namespaces_are_judged_each_and_merged() -> None:
    snap = Snapshot([pending("a1", "a"), pending("a2", "a"), pending("b1", "b"), pending("c1", "c")], [NODE],
                    1796011400.0)
    one = judged(snap, {"nobody"}, 0, ["a"])
    assert [v.objects for v in one.violations] == [("a/a1",), ("a/a2",)]
    two = judged(snap, {"nobody"}, 0, ["a", "b", "a"])
    assert [v.objects for v in two.violations] == [("a/a1",), ("a/a2",), ("b/b1",)]
    assert two.counts == {"pods": 3, "bound": 0, "pending": 3, "nodes": 1}
    assert len(judged(snap, {"nobody"}, 0, []).violations) == 4


def test_check_takes_namespaces() -> None:
    args = parser().parse_args(["check", "--namespace", "a", "--namespace", "b"])
    assert args.namespace == ["a", "b"]


def test_check_with_the_journal_shows_what_the_faults_excuse_apart(tmp_path: Path) -> None:
    """a1's ADDED was dropped on the scheduler's watch (the journal says so): its stranding is the faults' effect;
    a2 lost nothing and stays a violation. A Job's extra success is excused by the journal's lost create, named by
    its `written` owner (no history needed)."""
    snap = Snapshot([pending("a1", "a"), pending("a2", "a")], [NODE], 1796011400.0)
    report = judged(snap, {"nobody"}, 0, ["a"])
    report.violations.append(Violation("job-never-over-completions", "m", ("a/batch", "a/batch-1", "a/batch-2"),
                                       numbers={"succeeded": 2, "completions": 1}))
    writer = JournalWriter(tmp_path / "journal.jsonl", lambda: 1796011390.0)
    writer.inject("drop", {"dropEvents": {}}, "WATCH", "/api/v1/pods", agent=SCHEDULER)
    writer.watch_event("drop", "dropped", WatchEvent("ADDED", "Pod", "a", "a1", "10", False))
    writer.lost_create("lost", {"metadata": {"name": "batch-2", "namespace": "a", "uid": "p2", "ownerReferences": [
        {"kind": "Job", "name": "batch", "uid": "j1", "controller": True}]}})
    said = excuse_report(report, ledger.read_file(tmp_path / "journal.jsonl"))
    assert [v.objects for v in report.violations] == [("a/a2",)]
    assert [(v.invariant, v.objects[0]) for v, _ in report.excused] == [("stranded", "a/a1"),
                                                                       ("job-never-over-completions", "a/batch")]
    assert said[1] == ("not excused: a/a2: stranded with no dropped ADDED event of the pod in the ledger; a/a2: not "
                       "every node with room is unknown to the scheduler (node n1 lost no ADDED event in the ledger)")
    assert said[2].startswith("excused: Job a/batch: 1 extra succeeded pod, within 1 pod create committed unanswered")
    assert verdict_line(report).startswith("1 violations (") and "2 excused by the proxy's journal" in \
        verdict_line(report)
    assert [e["why"][:9] for e in report.as_dict()["excused"]] == ["the proxy", "Job a/bat"]
    assert parser().parse_args(["check", "--journal", "j.jsonl"]).journal == Path("j.jsonl")


def test_check_with_the_journal_excuses_a_pod_only_a_lost_node_has_room_for(tmp_path: Path) -> None:
    """End to end, from the snapshot: n2 alone has room for a1 and lost its ADDED on the scheduler's node watch,
    unchanged since (resourceVersion 702 in the event and at the check). Once n1 has room too, a1 could have gone
    there: a finding."""
    full = {"metadata": {"name": "n1", "resourceVersion": "701"}, "spec": {},
            "status": {"allocatable": {"cpu": "4", "memory": "1Gi", "pods": "0"}}}
    lost = {"metadata": {"name": "n2", "resourceVersion": "702"}, "spec": {},
            "status": {"allocatable": {"cpu": "4", "memory": "1Gi", "pods": "10"}}}
    writer = JournalWriter(tmp_path / "journal.jsonl", lambda: 1796011390.0)
    writer.inject("nodes", {"dropEvents": {"events": {"types": ["ADDED"]}}}, "WATCH", "/api/v1/nodes",
                  agent=SCHEDULER)
    writer.watch_event("nodes", "dropped", WatchEvent("ADDED", "Node", "", "n2", "702", False))
    book = ledger.read_file(tmp_path / "journal.jsonl")
    report = judged(Snapshot([pending("a1", "a")], [full, lost], 1796011400.0), {"nobody"}, 0, ["a"])
    [said] = excuse_report(report, book)
    assert not report.violations and said.startswith("excused: a/a1: every node with room for it (n2) lost its ADDED")
    roomy = {**full, "status": {"allocatable": {**full["status"]["allocatable"], "pods": "10"}}}
    report = judged(Snapshot([pending("a1", "a")], [roomy, lost], 1796011400.0), {"nobody"}, 0, ["a"])
    [said] = excuse_report(report, book)
    assert [v.objects for v in report.violations] == [("a/a1",)]
    assert said.endswith("(node n1 lost no ADDED event in the ledger)")


def _pod(namespace: str, scheduler: str | None) -> dict[str, Any]:
    spec = {"schedulerName": scheduler} if scheduler else {}
    return {"metadata": {"namespace": namespace, "name": "p"}, "spec": spec}


def test_a_check_with_no_scheduler_name_says_it_judged_no_pod_and_whose_pods_are_there() -> None:
    pods = [_pod("a", None), _pod("a", "yunikorn"), _pod("b", "yunikorn"), _pod("c", "yunikorn")]
    assert workload.unjudged(pods, set(), []) == (
        "no --scheduler-name, so no pod was judged by the scheduler invariants (stranded, safety, I1-I5); the pods "
        "here name default-scheduler (1 pod), yunikorn (3 pods)")
    assert workload.unjudged(pods, set(), ["b"]) is not None and "yunikorn (1 pod)" in str(
        workload.unjudged(pods, set(), ["b"]))
    assert workload.unjudged(pods, {"yunikorn"}, []) is None  # named: judged
    assert workload.unjudged(pods, set(), ["z"]) is None  # no pod in scope: nothing to say
