"""Held-back bursts on the real control plane: the whole load pending, then released as one wave."""

from __future__ import annotations

from typing import Any

import httpx
from kube_fault_proxy.rig.cluster.processes import group_alive
from kube_fault_proxy.rig.cluster.record import Cluster
from kube_fault_proxy.rig.runs.run_record import RunResult, Target
from kube_fault_proxy.rig.runs.runner import run_on
from kube_fault_proxy.rig.runs.scenario import Scenario

N = 200


def held_back(how: str, namespace: str, **load: Any) -> Scenario:
    return Scenario.model_validate({
        "apiVersion": "kube-fault-proxy/v1", "kind": "Scenario", "metadata": {"name": f"held-back-{how.lower()}"},
        "spec": {"load": {"count": N, "rate": 1000, "concurrency": 16, "namespace": namespace, "holdBack": how,
                          **load},
                 "settle": {"quiet": "20s", "timeout": "50s", "grace": "0s"},
                 "expect": {"kube-scheduler": {"verdict": "clean"}}}})


def run(c: Cluster, scenario: Scenario) -> RunResult:
    return run_on(Target(c.admin_api(), c.control_url, None, c), scenario, "kube-scheduler", 1, say=False)


def assert_one_wave(r: RunResult) -> None:
    w = r.wave
    assert w is not None and r.met is True, r.table
    assert r.load["created"] == N and w["pending"] == N  # all of it pending at the release
    # the run's own pods (the check counts the shared cluster's pods, earlier tests' included)
    assert max(s["pods"] for s in r.samples) == N and max(s["bound"] for s in r.samples) == N and w["waveBound"] == N
    assert all(s["bound"] == 0 for s in r.samples if s["t"] <= w["t"])  # none bound before it
    assert w["bindsPerSecond"] and w["bindsPerSecond"] > 0
    assert [e["event"] for e in r.events].count("wave-released") == 1


def test_scheduling_gates_hold_the_load_back_until_lifted_together(kube_scheduler_cluster: Cluster,
                                                                   namespace: str) -> None:
    r = run(kube_scheduler_cluster, held_back("schedulingGates", namespace, releaseConcurrency=32))
    assert_one_wave(r)
    assert r.wave is not None and r.wave["releaseFailed"] == 0
    print(f"gates: {N} lifted in {r.wave['releaseSeconds']}s; wave {r.wave}")
    changes = httpx.get(f"{kube_scheduler_cluster.control_url}/v1/info", timeout=10).json()["libraryChanges"]
    print(f"library changes applied: {sum(c['applied'] for c in changes)} of {len(changes)}")


def test_a_load_made_before_the_scheduler_starts_is_its_first_list(kube_scheduler_cluster: Cluster,
                                                                   namespace: str) -> None:
    c = kube_scheduler_cluster
    before = c.processes["kube-scheduler"].pid
    r = run(c, held_back("beforeScheduler", namespace))
    assert_one_wave(r)
    after = c.processes["kube-scheduler"].pid  # the shared cluster's scheduler runs again, a new process
    assert after != before and group_alive(after) and not group_alive(before)
    print(f"scheduler: ready {r.wave['releaseSeconds'] if r.wave else '?'}s after its start; wave {r.wave}")
