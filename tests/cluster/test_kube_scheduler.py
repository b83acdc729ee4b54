"""kube-scheduler, kubectl and the Python client through kube-fault-proxy, against a real apiserver."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from kube_fault_proxy.proxy.control.client import ControlClient
from kube_fault_proxy.rig.cluster.proxy_process import start_serve
from kube_fault_proxy.rig.cluster.record import Cluster
from kubernetes import watch

from tests.support.cluster import (
    all_running,
    api_client,
    create_pods,
    journal_names,
    kubectl,
    make_namespace,
    pods,
    wait_for,
)
from tests.support.processes import ROOT

BIND = {"verbs": ["create"], "resources": ["pods"], "subresources": ["binding"]}


def test_200_pods_are_bound_and_running(kube_scheduler_cluster: Cluster, namespace: str) -> None:
    c = kube_scheduler_cluster
    api = api_client(c.kubeconfig("admin"))
    make_namespace(api, namespace)
    control = ControlClient(c.control_url)
    before = control.stats()["requests"]
    names = create_pods(api, namespace, 200)
    wait_for("200 pods bound and Running", lambda: all_running(api, namespace, names), timeout=120)
    nodes = {p.spec.node_name for p in pods(api, namespace, names).values()}
    assert len(nodes) > 10  # spread over the fake nodes
    assert control.stats()["requests"] - before >= 200  # every Binding went through the proxy


def test_failed_binds_leave_pods_pending_then_switching_back_lets_them_finish(
    kube_scheduler_cluster: Cluster, namespace: str
) -> None:
    c = kube_scheduler_cluster
    api = api_client(c.kubeconfig("admin"))
    make_namespace(api, namespace)
    control = ControlClient(c.control_url)
    since = control.cursor()
    control.activate("fail-all-binds", rules=[{"name": "fail", "match": {**BIND, "namespaces": [namespace]},
                                         "fault": {"abort": {"status": 500}}}])
    try:
        names = create_pods(api, namespace, 10)
        wait_for("a failed bind for every pod", lambda: journal_names(control.injections(since)) >= set(names), 60)
        time.sleep(2)
        assert all(not p.spec.node_name for p in pods(api, namespace, names).values())
    finally:
        control.deactivate()
    wait_for("every pod bound after switching back", lambda: all_running(api, namespace, names), timeout=90)
    records = control.injections(since)
    assert {r["request"]["namespace"] for r in records} == {namespace}
    assert all(r["action"] == "respond 500" and r["request"]["targetNode"].startswith("kfp-node-") for r in records)
    log = c.log("kube-scheduler").read_text()
    failed_binds = [line for line in log.splitlines()
                    if "Error scheduling pod; retrying" in line and "injected by kube-fault-proxy" in line]
    seen = {n for n in names if any(f'pod="{namespace}/{n}"' in line for line in failed_binds)}
    assert seen == set(names)  # the scheduler saw each failure as a failed bind


def test_apf_throttling_is_retried_by_client_go(kube_scheduler_cluster: Cluster, namespace: str) -> None:
    """429 + Retry-After twice per pod: client-go retries by itself, kube-scheduler never sees it."""
    c = kube_scheduler_cluster
    api = api_client(c.kubeconfig("admin"))
    make_namespace(api, namespace)
    control = ControlClient(c.control_url)
    since = control.cursor()
    control.activate("throttle-twice", rules=[{"name": "apf", "match": {**BIND, "namespaces": [namespace]},
                                         "when": {"perObjectMax": 2}, "fault": {"throttle": {"retryAfterSeconds": 1}}}])
    try:
        names = create_pods(api, namespace, 5)
        wait_for("throttled pods bound", lambda: all_running(api, namespace, names), timeout=60)
    finally:
        control.deactivate()
    records = control.injections(since)
    assert sorted(journal_names(records)) == sorted(names)
    assert len(records) == 2 * len(names)
    log = c.log("kube-scheduler").read_text()
    failures = [line for line in log.splitlines() if namespace in line and ("rror" in line or "ailed" in line)]
    assert failures == []  # the scheduler never saw the 429s


def test_kubectl_through_the_proxy_sees_what_it_sees_directly(kube_scheduler_cluster: Cluster) -> None:
    c = kube_scheduler_cluster
    direct = json.loads(kubectl(c, "admin", "get", "--raw", "/api/v1/nodes"))
    proxied = json.loads(kubectl(c, "admin-via-proxy", "get", "--raw", "/api/v1/nodes"))
    assert [n["metadata"]["name"] for n in proxied["items"]] == [n["metadata"]["name"] for n in direct["items"]]
    assert proxied["items"] == direct["items"]
    kubectl(c, "admin-via-proxy", "create", "configmap", "kfp-cm", "--from-literal=a=b")
    assert json.loads(kubectl(c, "admin", "get", "configmap", "kfp-cm", "-o", "json"))["data"] == {"a": "b"}
    kubectl(c, "admin-via-proxy", "delete", "configmap", "kfp-cm")


def test_python_client_watch_streams_through_the_proxy(kube_scheduler_cluster: Cluster, namespace: str) -> None:
    c = kube_scheduler_cluster
    direct = api_client(c.kubeconfig("admin"))
    via = api_client(c.kubeconfig("admin-via-proxy"))
    make_namespace(direct, namespace)
    seen: list[str] = []

    def run() -> None:
        for event in watch.Watch().stream(via.list_namespaced_pod, namespace, timeout_seconds=20):
            seen.append(f"{event['type']} {event['object'].metadata.name}")
            if sum(s.startswith("ADDED") for s in seen) >= 3:
                return

    t = threading.Thread(target=run)
    t.start()
    time.sleep(1)
    names = create_pods(direct, namespace, 3, prefix="w")
    t.join(25)
    assert [s for s in seen if s.startswith("ADDED")] == [f"ADDED {n}" for n in names]


def whoami(c: Cluster, kubeconfig: str) -> str:
    review = json.loads(kubectl(c, kubeconfig, "auth", "whoami", "-o", "json"))
    return str(review["status"]["userInfo"]["username"])


def test_bearer_tokens_pass_through(kube_scheduler_cluster: Cluster) -> None:
    c = kube_scheduler_cluster
    assert whoami(c, "scheduler-via-proxy") == "system:kube-scheduler"
    assert whoami(c, "yunikorn-via-proxy") == "yunikorn"


def test_the_proxy_presents_a_client_certificate(kube_scheduler_cluster: Cluster, tmp_path: Path) -> None:
    """serve --kubeconfig with a client-certificate user: the apiserver sees that identity."""
    c = kube_scheduler_cluster
    served = start_serve(["--kubeconfig", str(c.kubeconfig("admin-cert")), "--listen", "127.0.0.1:0",
                          "--control", "127.0.0.1:0", "--journal", str(tmp_path / "j.jsonl"),
                          "--confdir", str(tmp_path / "ca")], tmp_path / "ready.json", tmp_path / "serve.log",
                         timeout=30, cwd=ROOT)
    try:
        out = tmp_path / "via.kubeconfig"
        r = subprocess.run([sys.executable, "-m", "kube_fault_proxy", "kubeconfig",
                            "--kubeconfig", str(c.kubeconfig("admin-cert")),
                            "--proxy-url", served.proxy_url, "--ca", served.ca_file, "-o", str(out)],
                           cwd=ROOT, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        c.state.kubeconfigs["cert-via-serve"] = str(out)
        assert whoami(c, "cert-via-serve") == "kfp-admin-cert"
    finally:
        assert served.stop(15) == 0
