"""A crash at a point on a real control plane: the scheduler kill -9'd right after the Nth Binding commit
(the proxy holds that answer) and started again; the run judged by the invariant checker."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from kube_fault_proxy.kube.kubeapi import Pod, delete_namespace
from kube_fault_proxy.proxy.control.client import ControlClient
from kube_fault_proxy.rig.cluster.processes import group_alive
from kube_fault_proxy.rig.cluster.record import Cluster
from kube_fault_proxy.rig.runs.run_record import RunResult, Target
from kube_fault_proxy.rig.runs.runner import SCHEDULER_NAMES, run_on
from kube_fault_proxy.rig.runs.scenario import Scenario

PODS = 60
# The 30th Binding sent is held if it commits (else the next that does). Counted as they arrive: YuniKorn
# sends a scheduling cycle's Bindings together, all before the first answer (an answered trigger at 29 never
# arms in a 60-pod wave there: measured, 0 crash points).
AT = 30
BIND = {"verbs": ["create"], "resources": ["pods"], "subresources": ["binding"]}


@dataclass
class CrashRun:
    """What the run did and what the journal says about the crash point."""

    result: RunResult
    before: int  # the scheduler's pid before the run
    after: int  # and after it
    point: dict[str, Any]  # the crash-point record
    released: dict[str, Any]  # what became of the held answer
    held_pod_node: str | None  # the held Binding's pod's node, read from the apiserver after the run


def crash_at_a_point(c: Cluster, scheduler: str, kill: list[dict[str, Any]] | None = None) -> CrashRun:
    """Run a 60-pod load through the proxy with a crash point at the 30th Binding of its namespace:
    on the crash-point record the scheduler is killed (SIGKILL to its process group) and restarted 1 s later, or
    (`kill`: the rule's list, a correlated crash) the components it names, each restarted after its own delay."""
    namespace = f"crash-{uuid.uuid4().hex[:6]}"
    bind = {**BIND, "namespaces": [namespace]}
    profile = {"apiVersion": "kube-fault-proxy/v1", "kind": "FaultProfile", "metadata": {"name": "crash-at-bind-30"},
               "spec": {"rules": [{"name": "bind-30", "match": bind,
                                   "when": {"trigger": {"match": bind, "count": AT}},
                                   "fault": {"crashPoint": {"holdSeconds": 30, **({"kill": kill} if kill else {})}}}]}}
    control = ControlClient(c.control_url)
    control.upload(profile)
    cursor = control.cursor()
    scenario = Scenario.model_validate({
        "apiVersion": "kube-fault-proxy/v1", "kind": "Scenario", "metadata": {"name": "crash-point"},
        "spec": {"load": {"count": PODS, "rate": 300, "concurrency": 8, "namespace": namespace},
                 "timeline": [{"at": "0s", "activate": "crash-at-bind-30"},
                              {"onEvent": "crash-point", "killScheduler": {"restartAfter": "1s"}},
                              {"onEvent": "scheduler-restarted", "after": "1s", "deactivate": True}],
                 "settle": {"quiet": "10s", "timeout": "90s", "grace": "0s"},
                 "expect": {scheduler: {"verdict": "clean"}}}})
    before = c.processes[scheduler].pid
    result = run_on(Target(c.admin_api(), c.control_url, c.yunikorn_url, c), scenario, scheduler, 1, say=False,
                    clean=False)
    after = c.processes[scheduler].pid
    records = control.journal_after(cursor).records
    [point] = [r for r in records if r["event"] == "crash-point"]
    [released] = [r for r in records if r["event"] == "crash-point-released"]
    with c.admin_api().client() as api:
        pod = api.get(Pod, point["request"]["name"], namespace=namespace)
        node = pod["spec"].get("nodeName")
        delete_namespace(api, namespace)  # the shared cluster carries nothing to the next test
    assert result.scheduler == scheduler and SCHEDULER_NAMES[scheduler]
    assert not group_alive(before) and group_alive(after), "the old scheduler is gone, the new one runs"
    return CrashRun(result, before, after, point, released, node)
