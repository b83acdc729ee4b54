"""deploy/ on the real node: two proxy replicas switched by FaultActivations, a scheduler behind the Service."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_fault_proxy.rig.cluster.build import kubernetes
from kube_fault_proxy.rig.cluster.record import Cluster

from tests.container.engine import built_image
from tests.support.cluster import api_client, start_cluster, stop_cluster, wait_for
from tests.support.in_cluster import (
    CONTROLLERS,
    KUBELET_CHAINS,
    Relay,
    import_image,
    iptables_chains,
    kustomization,
    running_kube_proxy,
    running_scheduler,
    scheduler_kubeconfig,
)
from tests.support.processes import ROOT

pytestmark = pytest.mark.cluster

NS = "kube-fault-proxy"
SCHEDULER = "via-kube-fault-proxy"
FAIL_BINDS = {"apiVersion": "kube-fault-proxy.io/v1", "kind": "FaultProfile",
              "metadata": {"name": "fail-binds", "namespace": NS},
              "spec": {"rules": [{"name": "fail-binds",
                                  "match": {"verbs": ["create"], "resources": ["pods"], "subresources": ["binding"]},
                                  "fault": {"abort": {"status": 500}}}]}}
PASS = {"apiVersion": "kube-fault-proxy.io/v1", "kind": "FaultProfile",
        "metadata": {"name": "pass", "namespace": NS}, "spec": {"rules": []}}


def activation(name: str, profile: str) -> dict[str, Any]:
    return {"apiVersion": "kube-fault-proxy.io/v1", "kind": "FaultActivation",
            "metadata": {"name": name, "namespace": NS}, "spec": {"profile": profile}}


def run_kubectl(c: Cluster, *args: str, stdin: str | None = None, timeout: float = 60) -> str:
    r = subprocess.run([str(kubernetes("kubectl").binary), "--kubeconfig", str(c.kubeconfig("admin")), *args],
                       input=stdin, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"kubectl {' '.join(args)}: {r.stderr}"
    return r.stdout


def rollout(c: Cluster, seconds: int) -> None:
    """`kubectl rollout status`; if it times out, the pods' state and their containers' logs in the message."""
    argv = [str(kubernetes("kubectl").binary), "--kubeconfig", str(c.kubeconfig("admin")), "-n", NS]
    r = subprocess.run([*argv, "rollout", "status", "deployment/kube-fault-proxy", f"--timeout={seconds}s"],
                       capture_output=True, text=True, timeout=seconds + 10)
    if r.returncode != 0:
        seen = [subprocess.run([*argv, *args], capture_output=True, text=True, timeout=30)
                for args in (["get", "pods", "-o", "wide"], ["get", "events"],
                             ["logs", "-l", "app.kubernetes.io/name=kube-fault-proxy", "--all-containers",
                              "--prefix", "--tail=20"])]
        raise AssertionError("rollout: " + r.stderr + "\n".join(x.stdout + x.stderr for x in seen))


def apply(c: Cluster, *objs: dict[str, Any]) -> None:
    run_kubectl(c, "apply", "-f", "-", stdin=yaml.safe_dump_all(objs))


def test_deploy_on_the_real_node_switched_by_kubectl_apply(tmp_path: Path) -> None:
    built = built_image()
    engine = built.engine
    print(f"image built {built.where} in {built.seconds:.1f}s")
    chains_before = iptables_chains()
    c = start_cluster(tmp_path / "state", "--nodes", "1", "--real-node", "--scheduler", "kube-scheduler",
                      "--controllers", CONTROLLERS, "--timeout", "90")
    relay = Relay(int(c.apiserver.rsplit(":", 1)[1]))
    try:
        api: Any = api_client(c.kubeconfig("admin"))
        print(f"image imported in {import_image(engine.env, c, tmp_path):.1f}s")
        relay.start()
        with running_kube_proxy(c, c.dir / "logs" / "kube-proxy.log"):
            # 1. deploy/ as deploy/README.md says: the CA Secret, then apply -k.
            ca_state = tmp_path / "ca-state"
            r = subprocess.run([str(ROOT / ".venv" / "bin" / "kube-fault-proxy"), "kubeconfig", "--kubeconfig",
                                str(c.kubeconfig("admin")), "--proxy-url", "https://kube-fault-proxy.kube-fault-proxy.svc",
                                "-o", str(ca_state / "local.kubeconfig")],
                               env={**os.environ, "KFP_STATE_DIR": str(ca_state)}, capture_output=True, text=True,
                               timeout=60)
            assert r.returncode == 0, r.stderr
            run_kubectl(c, "create", "namespace", NS)
            run_kubectl(c, "-n", NS, "create", "secret", "generic", "kube-fault-proxy-ca",
                        f"--from-file=mitmproxy-ca.pem={ca_state / 'ca' / 'mitmproxy-ca.pem'}")
            run_kubectl(c, "apply", "-k", str(kustomization(tmp_path)))
            rollout(c, 60)
            replicas = proxy_pods(api)
            assert len(replicas) == 2
            assert {p.spec.node_name for p in replicas} == {"kfp-real-node"}

            # 2. a scheduler on the host, pointed at the Service's ClusterIP, with a token of its own.
            service_ip = api.read_namespaced_service("kube-fault-proxy", NS).spec.cluster_ip
            run_kubectl(c, "-n", "kube-system", "create", "serviceaccount", "kfp-scheduler")
            run_kubectl(c, "create", "clusterrolebinding", "kfp-scheduler", "--clusterrole=cluster-admin",
                        "--serviceaccount=kube-system:kfp-scheduler")
            token = run_kubectl(c, "-n", "kube-system", "create", "token", "kfp-scheduler").strip()
            kubeconfig = tmp_path / "scheduler.kubeconfig"
            kubeconfig.write_text(yaml.safe_dump(scheduler_kubeconfig(
                service_ip, ca_state / "ca" / "mitmproxy-ca-cert.pem", token)))
            apply(c, FAIL_BINDS, PASS)
            with running_scheduler(kubeconfig, SCHEDULER, c.dir / "logs" / "kube-scheduler-via-service.log"):
                create_pod(api, "before")
                wait_for("`before` bound through the Service", lambda: bound(api, "before"), timeout=30)

                # 3. faults switched by kubectl apply
                apply(c, activation("storm", "fail-binds"))
                wait_for("both replicas applied `storm`", lambda: applied(c, "storm") == 2, timeout=30)
                create_pod(api, "during")
                wait_for("an injected bind failure", lambda: injected(c, "storm") >= 1, timeout=30)
                # the replica the scheduler's connection landed on: the one whose status counts injections
                serving = [p["name"] for p in status(c, "storm") if p.get("injections", 0) > 0]
                assert len(serving) == 1, status(c, "storm")
                assert not bound(api, "during")
                apply(c, activation("calm", "pass"))
                wait_for("both replicas applied `calm`", lambda: applied(c, "calm") == 2, timeout=30)
                wait_for("`during` bound once `calm` applies", lambda: bound(api, "during"), timeout=40)

                # 4. the replica serving the scheduler killed: replaced, and the scheduler reconnects
                address = api.read_namespaced_pod(serving[0], NS).status.pod_ip
                run_kubectl(c, "-n", NS, "delete", "pod", serving[0], "--grace-period=0", "--force", "--wait=false")
                # the API object goes at once; the kubelet kills the process a moment later. Only once the
                # replica's port refuses is the scheduler's connection to it gone, and `after` must reconnect.
                wait_for("the killed replica's port closed", lambda: not listening(address, 7443), timeout=30,
                         interval=0.1)
                create_pod(api, "after")
                wait_for("`after` bound after the kill", lambda: bound(api, "after"), timeout=60)
                rollout(c, 60)
                now = {p.metadata.name for p in proxy_pods(api)}
                assert serving[0] not in now and len(now) == 2
                print(json.dumps({"replicas": sorted(now), "relayed": relay.connections}))
    finally:
        with_relay_stopped(relay)
        stop_cluster(c)
    assert iptables_chains() - KUBELET_CHAINS == chains_before - KUBELET_CHAINS  # kube-proxy's: --cleanup


def with_relay_stopped(relay: Relay) -> None:
    if relay.started:
        relay.stop()


def proxy_pods(api: Any) -> list[Any]:
    return [p for p in api.list_namespaced_pod(NS, label_selector="app.kubernetes.io/name=kube-fault-proxy").items
            if p.metadata.deletion_timestamp is None]


def create_pod(api: Any, name: str) -> None:
    api.create_namespaced_pod("default", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"schedulerName": SCHEDULER, "nodeSelector": {"type": "kwok"},
                 "tolerations": [{"operator": "Exists"}],
                 "containers": [{"name": "c", "image": "none"}]}})


def listening(address: str, port: int) -> bool:
    """Whether a TCP connection to address:port is accepted now."""
    try:
        socket.create_connection((address, port), timeout=1).close()
    except OSError:
        return False
    return True


def bound(api: Any, name: str) -> bool:
    return bool(api.read_namespaced_pod(name, "default").spec.node_name)


def status(c: Cluster, name: str) -> list[dict[str, Any]]:
    obj = json.loads(run_kubectl(c, "-n", NS, "get", "faultactivation", name, "-o", "json"))
    return list(obj.get("status", {}).get("proxies", []))


def applied(c: Cluster, name: str) -> int:
    return sum(1 for p in status(c, name) if p.get("active"))


def injected(c: Cluster, name: str) -> int:
    return sum(int(p.get("injections", 0)) for p in status(c, name))

