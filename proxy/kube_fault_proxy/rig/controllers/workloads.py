"""Workloads for the workload controllers: one manifest per kind, pods that KWOK runs (and, for Jobs, completes).

Each pod template asks for little (10m cpu, 16Mi) and is deleted at once (grace 0), so a scale-down or
a rollout on KWOK's nodes moves as fast as the controllers do.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]
LABEL = "kfp-workload"  # every pod of a workload carries its name under this label


def template(name: str, restart: str = "Always") -> Obj:
    """A pod template: one pause container, small requests, no grace period."""
    return {"metadata": {"labels": {LABEL: name}},
            "spec": {"restartPolicy": restart, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}


def _apps(kind: str, name: str, spec: Obj) -> Obj:
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {LABEL: name}}, "template": template(name), **spec}}


def replicaset(name: str, replicas: int) -> Obj:
    """A bare ReplicaSet."""
    return _apps("ReplicaSet", name, {"replicas": replicas})


def deployment(name: str, replicas: int, max_surge: int | str = 1, max_unavailable: int | str = 0) -> Obj:
    """A Deployment rolling updates by maxSurge and maxUnavailable."""
    strategy = {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": max_surge, "maxUnavailable": max_unavailable}}
    return _apps("Deployment", name, {"replicas": replicas, "strategy": strategy})


def statefulset(name: str, replicas: int, strategy: str = "RollingUpdate") -> Obj:
    """A StatefulSet with parallel pod management (no volumes; its governing Service need not exist) and this
    update strategy (`Recreate`: KEP-3541, gate StatefulSetRecreateStrategy, Beta and on by default from 1.38)."""
    spec: Obj = {"replicas": replicas, "serviceName": name, "podManagementPolicy": "Parallel"}
    if strategy != "RollingUpdate":
        spec["updateStrategy"] = {"type": strategy}
    return _apps("StatefulSet", name, spec)


def daemonset(name: str) -> Obj:
    """A DaemonSet on every node."""
    return _apps("DaemonSet", name, {})


def job(name: str, completions: int, parallelism: int, indexed: bool = False) -> Obj:
    """A Job (Indexed or not); KWOK completes each of its pods once it runs."""
    spec: Obj = {"completions": completions, "parallelism": parallelism, "backoffLimit": 6,
                 "template": template(name, "Never")}
    if indexed:
        spec["completionMode"] = "Indexed"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}
