"""Gangs: a Workload with a gang PodGroup template, a PodGroup made from it with `minCount`, and its member pods
created over time, each naming the PodGroup (spec.schedulingGroup).

The API is scheduling.k8s.io/v1beta1 behind the `GenericWorkload` gate (Beta, off by default in v1.37.2 and
v1.38.0-beta.0) and, as a beta API, off in kube-apiserver unless `--runtime-config` turns it on. The gate must be
on in kube-apiserver (the API and the pod field), kube-scheduler (the gangscheduling plugin) and
kube-controller-manager (`GATES`): the apiserver's PodGroupProtection admission puts a finalizer on every
PodGroup, which only kube-controller-manager's podgroup-protection-controller takes off (`CONTROLLERS`), so
without it a PodGroup, and its namespace, is never deleted.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from lightkube import Client
from lightkube.generic_resource import create_namespaced_resource

from kube_fault_proxy.kube.kubeapi import ApiError, Kube, Pod, ensure_namespace
from kube_fault_proxy.rig.workloads.shapes import GANG_LABEL

GROUP_VERSION = "scheduling.k8s.io/v1beta1"
RUNTIME_CONFIG = f"{GROUP_VERSION}=true"
GATES = ("kube-apiserver:GenericWorkload=true", "kube-scheduler:GenericWorkload=true",
         "kube-controller-manager:GenericWorkload=true")
CONTROLLERS = ("podgroup-protection-controller",)  # what kube-controller-manager must run to delete PodGroups
PROBE_LABEL = "kube-fault-proxy/probe"
TEMPLATE = "members"

Workload = create_namespaced_resource("scheduling.k8s.io", "v1beta1", "Workload", "workloads")
PodGroup = create_namespaced_resource("scheduling.k8s.io", "v1beta1", "PodGroup", "podgroups")
Obj = dict[str, Any]


def workload(name: str, namespace: str, min_count: int) -> Obj:
    """A Workload with one gang PodGroup template."""
    return {"apiVersion": GROUP_VERSION, "kind": "Workload", "metadata": {"name": name, "namespace": namespace},
            "spec": {"podGroupTemplates": [{"name": TEMPLATE,
                                            "schedulingPolicy": {"gang": {"minCount": min_count}}}]}}


def pod_group(name: str, namespace: str, min_count: int, workload_name: str | None = None) -> Obj:
    """A gang PodGroup (made from the Workload's template, when one is named)."""
    spec: Obj = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if workload_name:
        spec["workloadRef"] = {"workloadName": workload_name, "templateName": TEMPLATE}
    return {"apiVersion": GROUP_VERSION, "kind": "PodGroup", "metadata": {"name": name, "namespace": namespace},
            "spec": spec}


def member(group: str, index: int, namespace: str, cpu: str, scheduler_name: str = "default-scheduler") -> Obj:
    """Member `index` of a gang: a pause pod requesting `cpu`, in the PodGroup."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{group}-{index}", "namespace": namespace, "labels": {GANG_LABEL: group}},
            "spec": {"schedulerName": scheduler_name, "terminationGracePeriodSeconds": 0,
                     "schedulingGroup": {"podGroupName": group},
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}}


def create_gang(client: Client, namespace: str, name: str, min_count: int, members: int, cpu: str,
                interval: float = 0.0, scheduler_name: str = "default-scheduler") -> list[str]:
    """The Workload, its PodGroup, then `members` pods, `interval` seconds apart; the pods' names. A release whose
    apiserver does not serve the API (or drops the pod field) is said plainly."""
    if not 1 <= min_count <= members:
        raise ValueError(f"a gang of {members} members cannot have minCount {min_count}")
    ensure_namespace(client, namespace)
    _create(client, Workload.from_dict(workload(name, namespace, min_count)), "Workloads")
    client.create(PodGroup.from_dict(pod_group(name, namespace, min_count, name)))
    names = []
    for i in range(members):
        if i and interval:
            time.sleep(interval)
        pod = client.create(Pod.from_dict(member(name, i, namespace, cpu, scheduler_name)))
        if not (pod["spec"].get("schedulingGroup") or {}).get("podGroupName"):
            raise RuntimeError("the apiserver dropped spec.schedulingGroup: GenericWorkload is off in kube-apiserver")
        names.append(pod["metadata"]["name"])
    return names


def create_groups(client: Client, namespace: str, groups: tuple[tuple[str, int], ...]) -> None:
    """A gang PodGroup (with no Workload: its workloadRef is optional) for each (name, minCount), before any member
    is created (the gang shape's; the namespace must exist)."""
    for name, count in groups:
        _create(client, PodGroup.from_dict(pod_group(name, namespace, count)), "PodGroups")


def _create(client: Client, obj: Any, kinds: str) -> None:
    """Create an object of the gang API; an apiserver that does not serve it (404) is said plainly."""
    try:
        client.create(obj)
    except ApiError as e:
        if e.status.code == 404:
            raise RuntimeError(f"the apiserver does not serve {GROUP_VERSION} {kinds}: start it with "
                               f"--runtime-config {RUNTIME_CONFIG} and {GATES[0]}") from None
        raise


def bound(client: Client, namespace: str, group: str) -> int:
    """How many of a gang's members are bound now."""
    return sum(1 for p in client.list(Pod, namespace=namespace, labels={GANG_LABEL: group})
               if p["spec"].get("nodeName"))


def probe(kube: Kube, namespace: str, cpu: str = "10m", timeout: float = 60.0,
          scheduler_name: str = "default-scheduler") -> tuple[str, float | None]:
    """A plain pod that fits, created now: (its name, seconds until it was bound, None if not within timeout)."""
    name = f"probe-{uuid.uuid4().hex[:6]}"
    doc = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": namespace, "labels": {PROBE_LABEL: "true"}},
           "spec": {"schedulerName": scheduler_name, "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                    "resources": {"requests": {"cpu": cpu, "memory": "16Mi"}}}]}}
    with kube.client() as client:
        ensure_namespace(client, namespace)
        start = time.monotonic()
        client.create(Pod.from_dict(doc))
        while time.monotonic() - start < timeout:
            if client.get(Pod, name, namespace=namespace)["spec"].get("nodeName"):
                return name, time.monotonic() - start
            time.sleep(0.2)
    return name, None
