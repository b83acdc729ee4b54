"""Helpers for tests on the local real control plane: the command, clusters up and down, pods, waiting."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
from kube_fault_proxy.kube.kubeapi import Kube
from kube_fault_proxy.rig.cluster.processes import group_alive
from kube_fault_proxy.rig.cluster.record import Cluster
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from lightkube.config.client_adapter import ConnectionParams
from prometheus_client.parser import text_string_to_metric_families

from tests.support.processes import ROOT


def kfp(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Run the kube-fault-proxy command."""
    return subprocess.run([sys.executable, "-m", "kube_fault_proxy", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def start_cluster(state_dir: Path, *args: str) -> Cluster:
    """`kube-fault-proxy cluster up …` as a user runs it."""
    r = kfp("cluster", "--state-dir", str(state_dir), "up", *args)
    assert r.returncode == 0, r.stderr
    return Cluster(state_dir)


def stop_cluster(c: Cluster) -> None:
    """`cluster down`, then prove nothing it started is left."""
    pids = [p.pid for p in c.processes.values()]
    r = kfp("cluster", "--state-dir", str(c.dir), "down")
    assert r.returncode == 0, r.stderr
    assert [pid for pid in pids if group_alive(pid)] == []


def apiserver_requests(api: Kube, **labels: str) -> int:
    """kube-apiserver's own count of the requests it answered, `apiserver_request_total` summed over
    the samples with these labels (e.g. resource="pods", subresource="binding", code="429"), read
    from its /metrics with `api`'s user (the admin's: system:masters may read it)."""
    params = ConnectionParams(timeout=httpx2.Timeout(30.0)).httpx_params(api.config)
    with httpx2.Client(**params) as http:
        r = http.get("/metrics")
        r.raise_for_status()
    return int(sum(s.value for family in text_string_to_metric_families(r.text) if family.name == "apiserver_request"
                   for s in family.samples if s.name == "apiserver_request_total"
                   and all(s.labels.get(k) == v for k, v in labels.items())))


def api_client(kubeconfig: Path) -> k8s.CoreV1Api:
    """The official Python client, configured from a kubeconfig."""
    return k8s.CoreV1Api(k8s_config.new_client_from_config(config_file=str(kubeconfig)))


def pod_manifest(name: str, scheduler: str = "default-scheduler", cpu: str = "100m") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"kfp-test": "1"}},
            "spec": {"schedulerName": scheduler,
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]}}


def create_pods(api: k8s.CoreV1Api, namespace: str, n: int, scheduler: str = "default-scheduler",
                prefix: str | None = None) -> list[str]:
    prefix = prefix or f"p{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}-{i:04d}" for i in range(n)]
    for name in names:
        api.create_namespaced_pod(namespace, pod_manifest(name, scheduler))
    return names


def pods(api: k8s.CoreV1Api, namespace: str, names: list[str]) -> dict[str, Any]:
    wanted = set(names)
    return {p.metadata.name: p for p in api.list_namespaced_pod(namespace).items if p.metadata.name in wanted}


def wait_for(what: str, check: Callable[[], bool], timeout: float, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def all_running(api: k8s.CoreV1Api, namespace: str, names: list[str]) -> bool:
    got = pods(api, namespace, names)
    return len(got) == len(names) and all(p.spec.node_name and p.status.phase == "Running" for p in got.values())


def make_namespace(api: k8s.CoreV1Api, name: str, timeout: float = 30) -> None:
    """Create a namespace and wait for its default ServiceAccount (the ServiceAccount admission
    plugin refuses pods until kube-controller-manager has made it)."""
    api.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_for(f"the default ServiceAccount in {name}",
             lambda: any(sa.metadata.name == "default" for sa in api.list_namespaced_service_account(name).items),
             timeout, 0.05)


def kubectl(c: Cluster, kubeconfig: str, *args: str) -> str:
    """The real kubectl (built with the cluster), against one of the cluster's kubeconfigs."""
    from kube_fault_proxy.rig.cluster.build import kubernetes

    r = subprocess.run([str(kubernetes("kubectl").binary), "--kubeconfig", str(c.kubeconfig(kubeconfig)), *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def journal_names(records: list[dict[str, Any]]) -> set[str]:
    return {r["request"]["name"] for r in records}


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1, default=str)[:3000]
