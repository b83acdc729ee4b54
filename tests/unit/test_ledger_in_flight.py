"""Writes cut in flight (`inFlight` on a resetUpstream `inject` and on an `outage-start`): what the ledger makes of
them and what they excuse. Journals written by the real Journal in the form the proxy writes (`in_flight.describe`:
verb, resource, namespace, generateName and controller from a create's body), histories written by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.rig.invariants import ledger
from kube_fault_proxy.rig.invariants.ledger import LedgerError

from tests.unit.test_ledger import Obj, Run


def cut_create(owner: Obj, **entry: Any) -> dict[str, Any]:
    """A pod create of `owner` as the proxy lists it in flight: no name (generateName), its controller from the body."""
    meta = owner["metadata"]
    return {"verb": "create", "resource": "pods", "namespace": meta["namespace"], "generateName": f"{meta['name']}-",
            "owner": {"kind": owner["kind"], "name": meta["name"], "uid": meta["uid"]}, **entry}


def outage(run: Run, *in_flight: dict[str, Any]) -> None:
    """An `outage-start` as OutageState.start journals it (a rule's stamp, its counts, the writes it cut)."""
    run.journal.journal.append("outage-start", **run.journal.stamp("o", "outage"), seconds=2.0, refuse="close",
                               clientConnectionsClosed=3, bindsSucceeded=0, bindsThrottled=0, bindsFailed=0,
                               inFlight=list(in_flight))


def reset(run: Run, *in_flight: dict[str, Any]) -> None:
    """A resetUpstream `inject` on the controller's next request, with the writes its connection had in flight."""
    run.journal.inject("r", {"resetUpstream": {}}, "GET", "/apis/apps/v1/namespaces/w/replicasets/web",
                       inFlight=list(in_flight))


def surplus_after_a_cut(run: Run, cut: str = "outage") -> tuple[Obj, Obj]:
    """A ReplicaSet of 3 with two pods; the third pod's create is in flight when the proxy cuts the connection, and
    it commits anyway: the controller, seeing an error, creates it again (4 live pods, one over)."""
    s = run.story
    rs = s.workload("ReplicaSet", "web", {"replicas": 3}, observedGeneration=1)
    s.pod(rs, "web-a")
    s.pod(rs, "web-b")
    s.pod(rs, "web-c")  # the create in flight committed
    (outage if cut == "outage" else reset)(run, cut_create(rs))
    return rs, s.pod(rs, "web-d")


@pytest.mark.parametrize("cut", ["outage", "resetUpstream"])
def test_one_surplus_pod_after_one_create_cut_in_flight_is_excused_once_removed(tmp_path: Path, cut: str) -> None:
    run = Run(tmp_path)
    _, dup = surplus_after_a_cut(run, cut)
    run.story.set("Pod", dup, "metadata.deletionTimestamp", "now")  # the controller's next sync removes it
    judged = run.judged()
    [e] = judged.excuses
    assert (e.invariant, e.excused, judged.fully_excused) == ("replicaset-never-over-replicas", True, True)
    assert "ReplicaSet w/web: at most 1 surplus pod" in e.why
    assert f"1 pod create committed unanswered or cut in flight (w/web-* at 4.0s, cut in flight by {cut})" in e.why


def test_two_surplus_pods_after_one_create_cut_in_flight_are_not_excused(tmp_path: Path) -> None:
    run = Run(tmp_path)
    rs, dup = surplus_after_a_cut(run)
    twin = run.story.pod(rs, "web-e")
    for p in (dup, twin):
        run.story.set("Pod", p, "metadata.deletionTimestamp", "now")
    judged = run.judged()
    [e] = judged.findings
    assert judged.excused == []
    assert "ReplicaSet w/web: 2 surplus pods" in e.why and "the ledger excuses 1" in e.why and "1 not excused" in e.why


def test_a_surplus_never_removed_after_a_cut_is_not_excused(tmp_path: Path) -> None:
    run = Run(tmp_path)
    surplus_after_a_cut(run, "resetUpstream")
    [e] = run.judged().findings
    assert "excused by 1 pod create committed unanswered or cut in flight" in e.why and "never removed" in e.why


def test_a_journal_without_in_flight_excuses_nothing_new(tmp_path: Path) -> None:
    """A journal written before the proxy listed the writes it cut: the same story is a finding, as it was."""
    run = Run(tmp_path)
    s = run.story
    rs = s.workload("ReplicaSet", "web", {"replicas": 3}, observedGeneration=1)
    for name in ("web-a", "web-b", "web-c"):
        s.pod(rs, name)
    run.journal.journal.append("outage-start", **run.journal.stamp("o", "outage"), seconds=2.0, refuse="close",
                               clientConnectionsClosed=3, bindsSucceeded=0, bindsThrottled=0, bindsFailed=0)
    run.journal.inject("r", {"resetUpstream": {}}, "POST", "/api/v1/namespaces/w/pods")  # the matched request only
    s.set("Pod", s.pod(rs, "web-d"), "metadata.deletionTimestamp", "now")
    assert [e.kind for e in run.ledger().effects] == ["outage", "connection-cut"]
    [e] = run.judged().findings
    assert "the ledger excuses 0 (no pod create committed unanswered)" in e.why


def test_a_cut_create_of_another_owner_or_one_refused_excuses_nothing(tmp_path: Path) -> None:
    run = Run(tmp_path)
    s = run.story
    rs = s.workload("ReplicaSet", "web", {"replicas": 1}, observedGeneration=1)
    other = s.workload("ReplicaSet", "other", {"replicas": 1}, observedGeneration=1)
    s.pod(rs, "web-a")
    outage(run, cut_create(other), cut_create(rs, upstreamStatus=409))  # the apiserver had refused web's: no commit
    s.set("Pod", s.pod(rs, "web-b"), "metadata.deletionTimestamp", "now")
    assert [e.kind for e in run.ledger().effects] == ["outage", "cut-in-flight"]
    [e] = run.judged().findings
    assert "ReplicaSet w/web: 1 surplus pod from" in e.why and "the ledger excuses 0" in e.why


def test_each_write_in_flight_becomes_an_effect_of_its_cut(tmp_path: Path) -> None:
    run = Run(tmp_path)
    rs = run.story.workload("ReplicaSet", "web", {"replicas": 1})
    reset(run, cut_create(rs), {"verb": "patch", "resource": "pods", "subresource": "status", "namespace": "w",
                                "name": "web-a", "rule": "d", "fault": "delay"})
    outage(run)  # nothing in flight
    book = run.ledger()
    assert [e.kind for e in book.effects] == ["connection-cut", "cut-in-flight", "cut-in-flight", "outage"]
    _, create, patch, _ = book.effects
    assert (create.verb, create.fault, create.rule, create.touched.show()) == (
        "create", "resetUpstream", "r", "pods w/web-* of ReplicaSet web")
    assert create.touched.owner_uid == rs["metadata"]["uid"] and create.seq == book.effects[0].seq
    assert (patch.verb, patch.touched.show()) == ("patch/status", "pods w/web-a")
    assert book.counts() == {"connection-cut": 1, "outage": 1, "cut-in-flight": 2}


@pytest.mark.parametrize(("in_flight", "says"), [
    ('"all"', "field 'inFlight' is 'all', not a list"),
    ('[{"verb":"get","resource":"pods"}]', "field 'inFlight[0]' is {'verb': 'get', 'resource': 'pods'}, not a write"),
    ('[{"verb":"create","resource":"pods","owner":"rs"}]', "field 'inFlight[0].owner' is 'rs', not an object"),
])
def test_a_bad_in_flight_list_is_named_by_file_line_and_field(tmp_path: Path, in_flight: str, says: str) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_text(f'{{"seq":1,"time":5.0,"event":"outage-start","seconds":1,"inFlight":{in_flight}}}\n')
    with pytest.raises(LedgerError) as e:
        ledger.read_file(path)
    assert str(e.value).startswith(f"{path}:1: {says}")
