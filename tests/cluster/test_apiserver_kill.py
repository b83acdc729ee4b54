"""The seed's own method: the real kube-apiserver killed (kill -9) mid-wave and started again."""

from __future__ import annotations

from kube_fault_proxy.proxy.control.client import ControlClient
from kube_fault_proxy.rig.cluster.processes import group_alive
from kube_fault_proxy.rig.cluster.record import Cluster
from kube_fault_proxy.rig.runs.run_record import Target
from kube_fault_proxy.rig.runs.runner import run_on
from kube_fault_proxy.rig.runs.scenario import Scenario

N = 200


def test_the_apiserver_is_killed_and_restarted_and_the_run_settles(kube_scheduler_cluster: Cluster,
                                                                    namespace: str) -> None:
    c = kube_scheduler_cluster
    url, before = c.apiserver, c.processes["kube-apiserver"].pid
    scenario = Scenario.model_validate({
        "apiVersion": "kube-fault-proxy/v1", "kind": "Scenario", "metadata": {"name": "kill"},
        "spec": {"load": {"count": N, "rate": 1000, "concurrency": 16, "namespace": namespace,
                          "holdBack": "beforeScheduler"},  # the kill lands in the wave, after the load
                 # as in yunikorn-3355-kill: once it is back, every pod gets an informer update (kube-scheduler
                 # retries a pod whose bind failed at once then, instead of after its backoff)
                 "timeline": [{"afterBinds": 50, "killApiserver": {"restartAfter": "3s"}},
                              {"onEvent": "apiserver-restarted", "after": "2s", "touchPods": True}],
                 "settle": {"quiet": "45s", "timeout": "90s", "grace": "0s"},
                 "expect": {"kube-scheduler": {"verdict": "clean"}}}})
    r = run_on(Target(c.admin_api(), c.control_url, None, c), scenario, "kube-scheduler", 1, say=False)
    killed = next(e for e in r.events if e["event"] == "apiserver-killed")
    restarted = next(e for e in r.events if e["event"] == "apiserver-restarted")
    after = c.processes["kube-apiserver"].pid
    assert killed["pid"] == before and restarted["pid"] == after != before, r.steps
    assert not group_alive(before) and group_alive(after) and c.apiserver == url  # same URL, new process
    assert restarted["downSeconds"] >= 3 and killed["bindsSucceeded"] is not None
    assert c.admin_api().ready() and ControlClient(c.control_url).stats()["bindsTotal"]
    assert r.met is True and r.check["counts"]["bound"] == N, r.table  # settled: every pod bound
    assert r.binds["beforeOutage"] is not None and r.binds["beforeOutage"]["succeeded"] >= 50
    print(f"kill: {r.steps}; binds {r.binds}; {r.seconds}s")
