"""A crash at a point on the real control plane with kube-scheduler: killed (kill -9) right after the Nth
Binding commit, restarted from what the cluster holds; the run settles with every pod bound. The crash is
correlated: kube-controller-manager dies at the same commit, and starts again a second after the scheduler."""

from __future__ import annotations

from kube_fault_proxy.rig.cluster.processes import group_alive
from kube_fault_proxy.rig.cluster.record import Cluster

from tests.support.crash_point import AT, PODS, crash_at_a_point


def test_kube_scheduler_killed_at_the_crash_point_restarts_and_binds_every_pod(
        kube_scheduler_cluster: Cluster) -> None:
    kcm_before = kube_scheduler_cluster.processes["kube-controller-manager"].pid
    run = crash_at_a_point(kube_scheduler_cluster, "kube-scheduler",
                           kill=[{"component": "scheduler", "restartAfterSeconds": 1},
                                 {"component": "kube-controller-manager", "restartAfterSeconds": 2}])
    r = run.result
    killed = next(e for e in r.events if e["event"] == "scheduler-killed")
    restarted = next(e for e in r.events if e["event"] == "scheduler-restarted")
    assert killed["pid"] == run.before and restarted["pid"] == run.after != run.before, r.steps
    assert restarted["downSeconds"] >= 1 and r.steps[1]["did"].startswith("killed kube-scheduler"), r.steps
    kcm_killed = next(e for e in r.events if e["event"] == "controller-manager-killed")
    kcm_restarted = next(e for e in r.events if e["event"] == "controller-manager-restarted")
    kcm_after = kube_scheduler_cluster.processes["kube-controller-manager"].pid
    assert kcm_killed["pid"] == kcm_before and kcm_restarted["pid"] == kcm_after != kcm_before, r.steps
    assert kcm_restarted["downSeconds"] >= 2 and kcm_killed["t"] - killed["t"] < 0.5, "both at the same commit"
    assert not group_alive(kcm_before) and group_alive(kcm_after)
    assert run.point["kill"][1] == {"component": "kube-controller-manager", "restartAfterSeconds": 2}
    assert run.point["upstreamStatus"] == 201 and run.point["request"]["subresource"] == "binding"
    assert run.point["rule"] == "bind-30" and run.point["holdSeconds"] == 30
    assert run.released["outcome"] == "dropped", "the killed scheduler never got the held answer"
    assert run.held_pod_node == run.point["request"]["targetNode"], "the held Binding was committed"
    crash_t = next(e["t"] for e in r.events if e["event"] == "crash-point")
    assert killed["t"] - crash_t < 1.5, "killed right after the crash point"
    assert r.check["counts"]["bound"] == PODS and r.met is True, r.table  # settled, every invariant kept
    print(f"crash point at Binding {AT}: {r.steps}; check {r.check['verdict']}; {r.seconds}s")
