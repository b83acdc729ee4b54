"""What the workload controllers promise, on hand-written histories: each breach caught, a legal history clean."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.rig.controllers.promises import check_world, judge
from kube_fault_proxy.rig.controllers.world import World
from kube_fault_proxy.rig.invariants.history import Change, History

Obj = dict[str, Any]
NS = "w"


class Story:
    """A history written by hand: each change gets the next resourceVersion and a time one second later."""

    def __init__(self) -> None:
        self.changes: list[Change] = []
        self.rv = itertools.count(100)
        self.t = 1000.0
        self.uids = itertools.count(1)

    def emit(self, kind: str, obj: Obj, type_: str = "MODIFIED") -> Obj:
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(next(self.rv))}}
        self.t += 1
        self.changes.append(Change(self.t, kind, type_, obj))
        return obj

    def workload(self, kind: str, name: str, spec: Obj, owner: Obj | None = None, **status: Any) -> Obj:
        meta: Obj = {"name": name, "namespace": NS, "uid": f"u{next(self.uids)}", "generation": 1}
        if owner is not None:
            meta["ownerReferences"] = [{"kind": owner["kind"], "uid": owner["metadata"]["uid"], "controller": True}]
        return self.emit(kind, {"kind": kind, "metadata": meta, "spec": spec, "status": status}, "ADDED")

    def pod(self, owner: Obj, name: str, node: str | None = "n1", phase: str = "Running", **meta: Any) -> Obj:
        return self.emit("Pod", {"metadata": {"name": name, "namespace": NS, "uid": f"u{next(self.uids)}",
                                              "ownerReferences": [{"kind": owner["kind"], "controller": True,
                                                                   "uid": owner["metadata"]["uid"]}], **meta},
                                 "spec": {"nodeName": node} if node else {}, "status": {"phase": phase}}, "ADDED")

    def node(self, name: str) -> Obj:
        return self.emit("Node", {"metadata": {"name": name, "uid": f"node-{name}"}, "spec": {}, "status": {}}, "ADDED")

    def set(self, kind: str, obj: Obj, path: str, value: Any) -> Obj:
        section, _, key = path.partition(".")
        new = {**obj, section: {**obj.get(section, {}), key: value} if key else value}
        if section == "spec":
            new["metadata"] = {**new["metadata"], "generation": new["metadata"]["generation"] + 1}
        return self.emit(kind, new)

    def delete(self, kind: str, obj: Obj) -> None:
        self.emit(kind, obj, "DELETED")

    def history(self) -> History:
        return History(list(self.changes), 1000.0, self.t + 1)


def names(violations: list[Any]) -> list[str]:
    return sorted(v.invariant for v in violations)


def legal() -> Story:
    """Every workload kind doing its job: scale up and down, a rollout within maxSurge, Jobs, a StatefulSet, a
    DaemonSet over two nodes; each ends as its spec asks."""
    s = Story()
    s.node("n1")
    s.node("n2")
    rs = s.workload("ReplicaSet", "rs", {"replicas": 2})
    a, b = s.pod(rs, "rs-a"), s.pod(rs, "rs-b")
    rs = s.set("ReplicaSet", rs, "spec.replicas", 3)
    s.pod(rs, "rs-c")
    rs = s.set("ReplicaSet", rs, "spec.replicas", 1)  # the surplus lingers a moment: allowed
    s.set("Pod", a, "metadata.deletionTimestamp", "now")
    s.delete("Pod", a)
    s.set("Pod", b, "metadata.deletionTimestamp", "now")
    dep = s.workload("Deployment", "d", {"replicas": 2, "strategy": {"rollingUpdate": {"maxSurge": 1}}})
    old = s.workload("ReplicaSet", "d-old", {"replicas": 2}, dep)
    o1, o2 = s.pod(old, "d-old-1"), s.pod(old, "d-old-2")
    new = s.workload("ReplicaSet", "d-new", {"replicas": 1}, dep)  # 2 + 1 = replicas + maxSurge
    n1 = s.pod(new, "d-new-1")
    old = s.set("ReplicaSet", old, "spec.replicas", 1)
    s.set("Pod", o1, "metadata.deletionTimestamp", "now")
    new = s.set("ReplicaSet", new, "spec.replicas", 2)
    s.pod(new, "d-new-2")
    old = s.set("ReplicaSet", old, "spec.replicas", 0)
    s.set("Pod", o2, "metadata.deletionTimestamp", "now")
    s.set("Deployment", dep, "status", {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2})
    del n1
    job = s.workload("Job", "j", {"completions": 3, "parallelism": 2})
    j1, j2 = s.pod(job, "j-1"), s.pod(job, "j-2")
    s.set("Pod", j1, "status.phase", "Succeeded")
    j3 = s.pod(job, "j-3")
    s.set("Pod", j2, "status.phase", "Succeeded")
    s.set("Pod", j3, "status.phase", "Succeeded")
    s.set("Job", job, "status", {"conditions": [{"type": "Complete", "status": "True"}]})
    ix = s.workload("Job", "ix", {"completions": 2, "parallelism": 2, "completionMode": "Indexed"})
    i0 = s.pod(ix, "ix-0", annotations={"batch.kubernetes.io/job-completion-index": "0"})
    i1 = s.pod(ix, "ix-1", annotations={"batch.kubernetes.io/job-completion-index": "1"})
    s.set("Pod", i0, "status.phase", "Succeeded")
    s.set("Pod", i1, "status.phase", "Succeeded")
    s.set("Job", ix, "status", {"conditions": [{"type": "Complete", "status": "True"}]})
    sts = s.workload("StatefulSet", "s", {"replicas": 3})
    for i in range(3):
        s.pod(sts, f"s-{i}")
    s3 = s.pod(sts, "s-3")  # scaled 4 -> 3 on the way: its ordinal 3 goes before the StatefulSet settles
    s.set("Pod", s3, "metadata.deletionTimestamp", "now")
    s.delete("Pod", s3)
    s.set("StatefulSet", sts, "status", {"observedGeneration": 1, "replicas": 3})
    ds = s.workload("DaemonSet", "ds", {})
    s.pod(ds, "ds-1", "n1")
    s.pod(ds, "ds-2", "n2")
    return s


def test_a_legal_history_is_clean() -> None:
    s = legal()
    assert judge(s.history(), faults_end=None, bound=60) == []


def test_a_replicaset_making_a_pod_over_replicas_is_caught() -> None:
    s = Story()
    rs = s.workload("ReplicaSet", "web", {"replicas": 2})
    for n in "abc":
        s.pod(rs, f"web-{n}")
    [v] = [v for v in judge(s.history()) if v.invariant == "replicaset-never-over-replicas"]
    assert v.message == ("ReplicaSet w/web has 3 live pods once w/web-c joined, over the replicas (2) of every "
                         "generation its controller may have acted on (generation 1): w/web-a, w/web-b, w/web-c")
    assert v.objects == ("w/web", "w/web-a", "w/web-b", "w/web-c")
    assert v.numbers == {"live": 3, "replicas": 2, "observedGeneration": 1, "generation": 1, "moments": 1}


def test_a_pod_decided_before_a_scale_down_and_landing_after_it_is_the_controllers_right() -> None:
    """Issue 49's race: the controller synced generation 2 (replicas 10) and its creations landed after the spec
    went to 2 (generation 3), before it wrote any observedGeneration. It may have acted on 10: not a breach."""
    s = Story()
    rs = s.workload("ReplicaSet", "web", {"replicas": 5})
    rs = s.set("ReplicaSet", rs, "spec.replicas", 10)
    rs = s.set("ReplicaSet", rs, "spec.replicas", 2)
    for n in "abcd":
        s.pod(rs, f"web-{n}")
    assert [v for v in judge(s.history()) if v.invariant == "replicaset-never-over-replicas"] == []


def test_a_pod_made_after_the_controller_observed_a_count_already_met_is_caught() -> None:
    """The real breach (kubernetes#129795's symptom): the controller wrote observedGeneration 3 (replicas 2) with
    2 live pods, and a pod joins with no newer generation: no generation it may act on asks for a third."""
    s = Story()
    rs = s.workload("ReplicaSet", "web", {"replicas": 5})
    rs = s.set("ReplicaSet", rs, "spec.replicas", 10)
    rs = s.set("ReplicaSet", rs, "spec.replicas", 2)
    a, b = s.pod(rs, "web-a"), s.pod(rs, "web-b")
    s.set("ReplicaSet", rs, "status", {"observedGeneration": 3, "replicas": 2})
    s.pod(rs, "web-c")
    [v] = [v for v in judge(s.history()) if v.invariant == "replicaset-never-over-replicas"]
    assert v.objects == ("w/web", "w/web-a", "w/web-b", "w/web-c") and a and b
    assert v.numbers == {"live": 3, "replicas": 2, "observedGeneration": 3, "generation": 3, "moments": 1}


def test_a_generation_the_history_never_recorded_is_not_judged() -> None:
    """The controller may have acted on a generation whose replicas nobody recorded: nothing to judge by."""
    s = Story()
    rs = s.workload("ReplicaSet", "web", {"replicas": 2})
    late = {**rs, "metadata": {**rs["metadata"], "generation": 3}}
    s.emit("ReplicaSet", late)
    for n in "abc":
        s.pod(rs, f"web-{n}")
    assert [v for v in judge(s.history()) if v.invariant == "replicaset-never-over-replicas"] == []


RACE = Path(__file__).parent / "data" / "replicaset-scale-race-2026-12-06.json.gz"


def test_the_recorded_gate_cell_race_is_clean_and_a_pod_after_it_settled_is_not() -> None:
    """A real history (the gate matrix's ReplicaSet cell, StaleControllerConsistencyReplicaSet=false, 2026-12-06):
    kube-controller-manager v1.36.3 logged "Too few replicas" need=10 creating=10 on generation 2, and its pods
    landed after generation 3 (replicas 2) was written. Clean now; the old form called it 3 live pods over 2.
    A twin pod joining after the controller settled at replicas 9 (observedGeneration 6) is caught."""
    h = History.from_dict(json.loads(gzip.decompress(RACE.read_bytes())))
    assert judge(h, h.start, 60) == []
    last = max((c for c in h.ordered() if c.kind == "Pod"), key=lambda c: c.revision)
    twin = _copy(last, "rs-twin")
    h.changes.append(Change(twin.t, twin.kind, twin.type,
                            {**twin.obj, "metadata": {**twin.obj["metadata"], "resourceVersion": "999999"}}))
    [v] = [v for v in judge(h, h.start, 60) if v.invariant == "replicaset-never-over-replicas"]
    assert v.numbers == {"live": 10, "replicas": 9, "observedGeneration": 6, "generation": 6, "moments": 1}


def test_a_deployment_over_max_surge_is_caught() -> None:
    s = Story()
    dep = s.workload("Deployment", "d", {"replicas": 2})  # maxSurge 25% of 2, rounded up: 1
    s.workload("ReplicaSet", "d-1", {"replicas": 2}, dep)
    s.workload("ReplicaSet", "d-2", {"replicas": 2}, dep)
    [v] = [v for v in judge(s.history()) if v.invariant == "replicaset-never-over-replicas"]
    assert v.kind == "deployment" and v.numbers["asked"] == 4 and v.numbers["maxSurge"] == 1
    assert "Deployment w/d's ReplicaSets ask for 4 pods (d-1 2, d-2 2), over replicas 2 + maxSurge 1" in v.message


def test_a_job_over_completions_and_parallelism_is_caught() -> None:
    s = Story()
    job = s.workload("Job", "j", {"completions": 2, "parallelism": 2})
    pods = [s.pod(job, f"j-{i}") for i in range(3)]
    for p in pods:
        s.set("Pod", p, "status.phase", "Succeeded")
    found = judge(s.history())
    assert names(found) == ["job-active-within-parallelism", "job-never-over-completions", "workload-converges"]
    over = next(v for v in found if v.invariant == "job-never-over-completions")
    assert over.message == "Job w/j has 3 succeeded pods, completions 2: w/j-0, w/j-1, w/j-2"
    active = next(v for v in found if v.invariant == "job-active-within-parallelism")
    assert active.numbers == {"active": 3, "parallelism": 2, "moments": 1}


def test_an_indexed_job_with_two_successes_for_one_index_is_caught() -> None:
    s = Story()
    job = s.workload("Job", "ix", {"completions": 2, "parallelism": 2, "completionMode": "Indexed"})
    twins = [s.pod(job, f"ix-0-{n}", annotations={"batch.kubernetes.io/job-completion-index": "0"}) for n in "ab"]
    s.delete("Pod", s.set("Pod", twins[0], "status.phase", "Succeeded"))  # gone, but it did succeed
    s.set("Pod", twins[1], "status.phase", "Succeeded")
    s.set("Job", job, "status", {"conditions": [{"type": "Complete", "status": "True"}]})
    [v] = judge(s.history())
    assert v.invariant == "indexed-job-one-success-per-index" and v.kind == "index-0"
    assert v.message == "Job w/ix has 2 succeeded pods for index 0: w/ix-0-a, w/ix-0-b"


def test_statefulset_twins_and_pods_beyond_replicas_are_caught() -> None:
    s = Story()
    sts = s.workload("StatefulSet", "s", {"replicas": 2})
    s.pod(sts, "s-0")
    s.pod(sts, "s-1")
    s.pod(sts, "s-1b", labels={"apps.kubernetes.io/pod-index": "1"})
    s.pod(sts, "s-2")
    s.set("StatefulSet", sts, "status", {"observedGeneration": 1, "replicas": 2})
    found = judge(s.history())
    assert names(found) == ["statefulset-none-beyond-replicas-once-settled", "statefulset-one-pod-per-ordinal",
                            "workload-converges"]
    twins = next(v for v in found if v.invariant == "statefulset-one-pod-per-ordinal")
    assert twins.message == "StatefulSet w/s has 2 pods for ordinal 1: w/s-1, w/s-1b"
    beyond = next(v for v in found if v.invariant == "statefulset-none-beyond-replicas-once-settled")
    assert beyond.objects == ("w/s", "w/s-2")


def test_a_daemonset_with_two_pods_on_one_node_is_caught() -> None:
    s = Story()
    s.node("n1")
    s.node("n2")
    ds = s.workload("DaemonSet", "ds", {})
    s.pod(ds, "ds-a", "n1")
    s.pod(ds, "ds-b", "n1")
    found = judge(s.history())
    assert names(found) == ["daemonset-one-pod-per-node", "workload-converges"]
    crowded = found[0]
    assert crowded.node == "n1" and crowded.message == \
        "DaemonSet w/ds has 2 live pods for node n1 (at most 1): w/ds-a, w/ds-b"
    assert found[1].message.startswith("DaemonSet w/ds never converged: 2 live pods for 2 eligible nodes")


def test_convergence_is_judged_against_the_bound_after_the_faults_end() -> None:
    s = Story()
    rs = s.workload("ReplicaSet", "slow", {"replicas": 1})
    faults_end = s.t
    s.t += 30
    s.pod(rs, "slow-a")  # converged 31 s after the faults ended
    assert judge(s.history(), faults_end, bound=60) == []
    [late] = judge(s.history(), faults_end, bound=10)
    assert late.invariant == "workload-converges" and late.numbers["seconds"] == pytest.approx(31)


def test_a_snapshot_judges_hand_made_objects() -> None:
    """A ReplicaSet of 2 owning 3 live pods, a Job of 2 completions owning 3 succeeded pods, a DaemonSet with two
    pods on one node, as a user's cluster with no controllers running would show them."""
    s = Story()
    s.node("n1")
    rs = s.workload("ReplicaSet", "rs", {"replicas": 2}, observedGeneration=1, replicas=2)  # it says it settled
    for i in range(3):
        s.pod(rs, f"rs-{i}")
    shrinking = s.workload("ReplicaSet", "shrinking", {"replicas": 1})  # a scale-down's surplus: not settled yet
    for i in range(3):
        s.pod(shrinking, f"shrinking-{i}")
    job = s.workload("Job", "job", {"completions": 2, "parallelism": 2})
    for i in range(3):
        s.pod(job, f"job-{i}", phase="Succeeded")
    ds = s.workload("DaemonSet", "ds", {})
    s.pod(ds, "ds-0", "n1")
    s.pod(ds, "ds-1", "n1")
    world = World((c.kind, c.obj) for c in s.changes)
    found = check_world(world)
    assert names(found) == ["daemonset-one-pod-per-node", "job-never-over-completions",
                            "replicaset-never-over-replicas"]
    assert check_world(world, ["elsewhere"]) == []
    assert [v.message for v in found][:2] == ["ReplicaSet w/rs has 3 live pods, replicas 2, and its status says it "
                                              "settled (observedGeneration 1, replicas 2): w/rs-0, w/rs-1, w/rs-2",
                                              "Job w/job has 3 succeeded pods, completions 2: w/job-0, w/job-1, "
                                              "w/job-2"]


def test_a_history_round_trips_through_json(tmp_path: Any) -> None:
    h = legal().history()
    h.save(tmp_path / "h.json")
    assert History.load(tmp_path / "h.json") == h


RECORDED = Path(__file__).parent / "data" / "controllers-history-clean.json.gz"


def recorded() -> History:
    """A real history: kube-controller-manager v1.36.3 through the proxy (no fault) with every workload kind, a
    Deployment rollout, a ReplicaSet scaled 2 -> 4 -> 1, a StatefulSet 3 -> 1 and its pod deleted
    (tests/cluster/test_controllers.py's sequence, recorded from the apiserver directly)."""
    return History.from_dict(json.loads(gzip.decompress(RECORDED.read_bytes())))


def _copy(change: Change, name: str, **status: Any) -> Change:
    """The same change a moment later, for a twin pod that never existed."""
    meta = {**change.obj["metadata"], "name": name, "uid": f"twin-{name}"}
    obj = {**change.obj, "metadata": meta, "status": {**change.obj.get("status", {}), **status}}
    return Change(change.t + 0.001, change.kind, change.type, obj)


def test_a_recorded_clean_history_is_clean() -> None:
    h = recorded()
    assert len(h.changes) == 182 and {c.kind for c in h.changes} >= {"ReplicaSet", "Deployment", "Job",
                                                                      "StatefulSet", "DaemonSet"}
    assert judge(h, faults_end=h.start, bound=60) == []


def test_a_twin_pod_in_the_recorded_history_is_caught() -> None:
    h = recorded()
    first = next(c for c in h.ordered() if c.kind == "Pod" and c.obj["metadata"]["name"].startswith("rs-"))
    h.changes.append(_copy(first, "rs-twin"))
    over = [v for v in judge(h, h.start, 60) if v.invariant == "replicaset-never-over-replicas"]
    ns = first.obj["metadata"]["namespace"]
    [v] = over
    assert v.objects[0] == f"{ns}/rs" and f"{ns}/rs-twin" in v.objects
    assert v.numbers["live"] == v.numbers["replicas"] + 1


def test_an_extra_success_in_the_recorded_history_is_caught() -> None:
    h = recorded()
    done = next(c for c in h.ordered() if c.kind == "Pod" and c.obj["metadata"]["name"].startswith("indexed-0")
                and c.obj["status"].get("phase") == "Succeeded")
    h.changes.append(_copy(done, "indexed-0-twin"))
    found = {v.invariant for v in judge(h, h.start, 60)}
    assert found == {"job-never-over-completions", "indexed-job-one-success-per-index"}


def _recreate(s: Story, replicas: int = 2) -> tuple[Obj, list[Obj]]:
    """A Recreate StatefulSet whose pods all run at revision r1."""
    sts = s.workload("StatefulSet", "c", {"replicas": replicas, "updateStrategy": {"type": "Recreate"}},
                     updateRevision="r1")
    pods = [s.pod(sts, f"c-{i}", labels={"controller-revision-hash": "r1"}) for i in range(replicas)]
    return sts, pods


def test_a_recreate_rollout_that_waits_for_the_old_pods_to_go_is_clean() -> None:
    """KEP-3541's order: every r1 pod deleted and gone (a pod that ended may stay), then the r2 pods."""
    s = Story()
    sts, (c0, c1) = _recreate(s)
    sts = s.set("StatefulSet", sts, "spec.template", {"metadata": {"annotations": {"kfp-rollout": "2"}}})
    s.set("Pod", c0, "metadata.deletionTimestamp", "now")
    s.delete("Pod", c0)
    s.set("Pod", c1, "status.phase", "Failed")  # ended: no longer runs, though not yet removed
    s.pod(sts, "c-0", labels={"controller-revision-hash": "r2"})
    s.delete("Pod", c1)
    s.pod(sts, "c-1", labels={"controller-revision-hash": "r2"})
    s.set("StatefulSet", sts, "status", {"observedGeneration": 2, "replicas": 2, "updateRevision": "r2"})
    assert judge(s.history(), faults_end=None, bound=60) == []


def test_a_recreate_pod_made_while_an_old_one_is_still_terminating_is_caught() -> None:
    s = Story()
    sts, (c0, c1) = _recreate(s)
    sts = s.set("StatefulSet", sts, "spec.template", {"metadata": {"annotations": {"kfp-rollout": "2"}}})
    s.set("Pod", c0, "metadata.deletionTimestamp", "now")
    s.delete("Pod", c0)
    c1 = s.set("Pod", c1, "metadata.deletionTimestamp", "now")  # deleted, not yet fully terminated
    s.pod(sts, "c-0", labels={"controller-revision-hash": "r2"})
    s.delete("Pod", c1)
    s.pod(sts, "c-1", labels={"controller-revision-hash": "r2"})
    s.set("StatefulSet", sts, "status", {"observedGeneration": 2, "replicas": 2, "updateRevision": "r2"})
    [mixed] = judge(s.history(), faults_end=None, bound=60)
    assert mixed.invariant == "statefulset-recreate-never-mixes-revisions" and mixed.kind == "revision-r2"
    assert mixed.message == ("StatefulSet w/c (updateStrategy Recreate) created c-0 at revision r2 while 1 pod(s) "
                             "of another revision had not ended: w/c-1")
    assert mixed.objects == ("w/c", "w/c-0", "w/c-1")


def test_a_rolling_statefulset_may_run_two_revisions() -> None:
    """The invariant is Recreate's promise only: a RollingUpdate StatefulSet replaces pods one at a time."""
    s = Story()
    sts = s.workload("StatefulSet", "r", {"replicas": 2}, updateRevision="r2")
    s.pod(sts, "r-0", labels={"controller-revision-hash": "r1"})
    s.pod(sts, "r-1", labels={"controller-revision-hash": "r2"})
    s.set("StatefulSet", sts, "status", {"observedGeneration": 1, "replicas": 2, "updateRevision": "r2"})
    assert judge(s.history(), faults_end=None, bound=60) == []


def test_a_recreate_statefulset_left_at_the_old_revision_has_not_converged() -> None:
    s = Story()
    sts, _ = _recreate(s)
    sts = s.set("StatefulSet", sts, "spec.template", {"metadata": {"annotations": {"kfp-rollout": "2"}}})
    s.set("StatefulSet", sts, "status", {"observedGeneration": 2, "replicas": 2, "updateRevision": "r2"})
    [stuck] = judge(s.history(), faults_end=None, bound=60)
    assert stuck.invariant == "workload-converges"
    assert "pods not at update revision r2: ['c-0', 'c-1']" in stuck.message
