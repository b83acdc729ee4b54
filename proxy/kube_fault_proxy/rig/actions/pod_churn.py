"""Pod churn as scenario steps: foreign pods (placed by `nodeName`, foreign to the scheduler under test) that
run and terminate, and a pod deleted while its Binding is held."""

from __future__ import annotations

import contextlib
import datetime
import time
from typing import Any

from lightkube import ApiError, Client
from lightkube.types import PatchType

from kube_fault_proxy.kube.kubeapi import Pod

FOREIGN_LABEL = "kube-fault-proxy/foreign"  # value: the run's id
FOREIGN_SCHEDULER = "kfp-foreign"  # no scheduler has this name: the pods are placed by nodeName only


def foreign_pod(run_id: str, node: str, index: int, cpu: str) -> dict[str, Any]:
    """A pod bound by `nodeName` (no Binding, no scheduler), as a DaemonSet's or a static pod's would be."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"foreign-{run_id}-{index}", "labels": {FOREIGN_LABEL: run_id}},
            "spec": {"nodeName": node, "schedulerName": FOREIGN_SCHEDULER, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"requests": {"cpu": cpu, "memory": "16Mi"}}}]}}


def create_foreign(api: Client, namespace: str, run_id: str, node: str, count: int, cpu: str) -> str:
    """Create `count` foreign pods on a node; what was done."""
    start = len(list(api.list(Pod, namespace=namespace, labels={FOREIGN_LABEL: run_id})))
    for i in range(start, start + count):
        api.create(Pod.from_dict(foreign_pod(run_id, node, i, cpu)), namespace=namespace)
    return f"created {count} foreign pods on {node}"


def succeeded(pod: dict[str, Any], now: datetime.datetime | None = None) -> dict[str, Any]:
    """The status patch a kubelet sends for a pod whose containers all exited 0."""
    at = (now or datetime.datetime.now(datetime.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    containers = [c["name"] for c in pod["spec"]["containers"]]
    return {"status": {"phase": "Succeeded", "conditions": [{"type": "Ready", "status": "False",
                                                             "reason": "PodCompleted", "lastTransitionTime": at}],
                       "containerStatuses": [{"name": name, "ready": False, "restartCount": 0, "image": "pause",
                                              "imageID": "", "state": {"terminated": {
                                                  "exitCode": 0, "reason": "Completed", "startedAt": at,
                                                  "finishedAt": at}}} for name in containers]}}


def terminate_foreign(api: Client, namespace: str, run_id: str) -> str:
    """Mark every foreign pod of the run Succeeded (what a kubelet reports when they exit); what was done."""
    pods = list(api.list(Pod, namespace=namespace, labels={FOREIGN_LABEL: run_id}))
    for p in pods:
        api.patch(Pod.Status, p["metadata"]["name"], succeeded(p), namespace=namespace, patch_type=PatchType.MERGE)
    return f"marked {len(pods)} foreign pods Succeeded"


def clean_foreign(api: Client, namespace: str, run_id: str, timeout: float = 60.0) -> int:
    """Delete the run's foreign pods and wait until they are gone; how many there were."""
    pods = list(api.list(Pod, namespace=namespace, labels={FOREIGN_LABEL: run_id}))
    for p in pods:
        with contextlib.suppress(ApiError):
            api.delete(Pod, p["metadata"]["name"], namespace=namespace, grace_period=0)
    deadline = time.monotonic() + timeout
    while list(api.list(Pod, namespace=namespace, labels={FOREIGN_LABEL: run_id})) and time.monotonic() < deadline:
        time.sleep(0.2)
    return len(pods)


def delete_pod(api: Client, name: str, namespace: str) -> str:
    """Delete a pod at once (grace period 0); what was done."""
    api.delete(Pod, name, namespace=namespace, grace_period=0)
    return f"deleted pod {namespace}/{name}"
