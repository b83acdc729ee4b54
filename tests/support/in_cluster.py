"""deploy/ on the real node: the image imported into containerd, kube-proxy for Services, an apiserver relay.

What the rig's control plane lacks for pods that really run, and what is added here (each piece stops
cleanly): kube-apiserver listens on 127.0.0.1 only, which a pod cannot reach, so a relay on the node's
bridge address (port 443) forwards to it, and the pods resolve `kubernetes.default.svc` to that address
(a hostAlias: no cluster DNS; and a pod has no route to a ClusterIP, the CNI bridge gives it none); no
kube-proxy runs, so one (the same k8s.io/kubernetes build, iptables mode) makes the proxies' Service's
ClusterIP work for a scheduler on the host; on exit `kube-proxy --cleanup` removes its chains.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from kube_fault_proxy.rig.cluster import build
from kube_fault_proxy.rig.cluster.processes import free_port, spawn, stop_groups
from kube_fault_proxy.rig.cluster.real_node_config import K8S_NAMESPACE, NODE_IP, NODE_NAME, POD_SUBNET
from kube_fault_proxy.rig.cluster.record import Cluster

from tests.support.processes import ROOT

# kube-controller-manager for Deployments and Services: the rig's defaults plus the workload and
# endpoint-slice controllers (kube-proxy reads EndpointSlices).
CONTROLLERS = ("namespace-controller,garbage-collector-controller,serviceaccount-controller,"
               "serviceaccount-token-controller,root-ca-certificate-publisher-controller,node-lifecycle-controller,"
               "taint-eviction-controller,pod-garbage-collector-controller,clusterrole-aggregation-controller,"
               "replicaset-controller,deployment-controller,endpointslice-controller")
IMAGE = "localhost/kube-fault-proxy:local"  # what tests/container/engine.py builds


def kube_proxy() -> build.Component:
    """kube-proxy from k8s.io/kubernetes at the control plane's version."""
    return build.kubernetes("kube-proxy")


# The kubelet's own chains (it makes them whatever the proxy; `cluster down` leaves them today).
KUBELET_CHAINS = frozenset(f"{t}/{n}" for t in ("nat", "filter", "mangle")
                           for n in ("KUBE-KUBELET-CANARY", "KUBE-FIREWALL", "KUBE-IPTABLES-HINT"))


def iptables_chains() -> set[str]:
    """The KUBE-* chains in the nat, filter and mangle tables now."""
    chains: set[str] = set()
    for table in ("nat", "filter", "mangle"):
        out = subprocess.run(["iptables", "-t", table, "-S"], capture_output=True, text=True, timeout=30).stdout
        chains |= {f"{table}/{line.split()[1]}" for line in out.splitlines()
                   if line.startswith("-N KUBE-")}
    return chains


class Relay:
    """A TCP relay from the node's bridge address to kube-apiserver's loopback port, in a thread."""

    def __init__(self, target_port: int, port: int = 443) -> None:
        self.target_port = target_port
        self.port = port
        self.connections = 0
        self.started = False
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._server: asyncio.Server | None = None

    def start(self) -> None:
        """Listen on NODE_IP:port and serve until `stop`."""
        self._thread.start()
        assert self._ready.wait(10), "the relay did not start"
        self.started = True

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._pipe, NODE_IP, self.port))
        self._ready.set()
        self._loop.run_forever()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return

        async def copy(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            with contextlib.suppress(OSError):
                w.close()
        await asyncio.gather(copy(reader, up_w), copy(up_r, writer))

    def stop(self) -> None:
        """Close the listener and every relayed connection; join the thread."""
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@contextlib.contextmanager
def running_kube_proxy(c: Cluster, log: Path) -> Iterator[int]:
    """kube-proxy (iptables mode) for the node, as admin; on exit stopped and `--cleanup` run."""
    binary = build.build(kube_proxy())
    metrics, healthz = free_port(), free_port()
    argv = [str(binary), f"--kubeconfig={c.kubeconfig('admin')}", f"--hostname-override={NODE_NAME}",
            "--proxy-mode=iptables", f"--cluster-cidr={POD_SUBNET}", "--conntrack-max-per-core=0",
            "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
            "--iptables-localhost-nodeports=false", f"--metrics-bind-address=127.0.0.1:{metrics}",
            f"--healthz-bind-address=127.0.0.1:{healthz}", "--v=1"]
    pid = spawn(argv, log)
    try:
        yield pid
    finally:
        stop_groups({"kube-proxy": pid}, 5)
        r = subprocess.run([str(binary), "--cleanup", "--proxy-mode=iptables", "--v=1"], capture_output=True,
                           text=True, timeout=60)
        with log.open("a") as f:
            f.write(f"--- kube-proxy --cleanup: exit {r.returncode}\n{r.stdout}{r.stderr}")


def real_node_socket(c: Cluster) -> str:
    """The real node's containerd socket."""
    assert c.state.real_node is not None, f"no real node in {c.dir}"
    return c.state.real_node.socket


def import_image(engine_env: dict[str, str], c: Cluster, work: Path) -> float:
    """`podman save` the proxy's image to a docker archive and `ctr images import` it; the seconds."""
    t0 = time.monotonic()
    archive = work / "kube-fault-proxy.tar"
    r = subprocess.run(["podman", "save", "--format", "docker-archive", "-o", str(archive), IMAGE],
                       env=engine_env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["ctr", "--address", real_node_socket(c), "-n", K8S_NAMESPACE, "images", "import",
                        str(archive)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    archive.unlink()
    return time.monotonic() - t0


def kustomization(work: Path) -> Path:
    """An overlay of deploy/ as shipped: the image named as imported, pods on the real node, and the
    name `kubernetes.default.svc` (no cluster DNS here) given the node's address, where the relay listens."""
    overlay = work / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [os.path.relpath(ROOT / "deploy", overlay)],  # kustomize wants it relative
        "images": [{"name": "kube-fault-proxy", "newName": IMAGE.split(":")[0], "newTag": IMAGE.split(":")[1]}],
        "patches": [{"target": {"kind": "Deployment", "name": "kube-fault-proxy"}, "patch": yaml.safe_dump({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "kube-fault-proxy"},
            "spec": {"template": {"spec": {
                "nodeSelector": {"type": "real"},
                "hostAliases": [{"ip": NODE_IP, "hostnames": ["kubernetes.default.svc"]}]}}}})}]}))
    return overlay


def scheduler_kubeconfig(service_ip: str, ca_cert: Path, token: str) -> dict[str, Any]:
    """deploy/scheduler's kubeconfig for a scheduler on the host: the Service by its ClusterIP (no DNS),
    the TLS name the Service's DNS name, the proxies' CA, a service-account token."""
    return {"apiVersion": "v1", "kind": "Config", "current-context": "kfp",
            "clusters": [{"name": "kfp", "cluster": {
                "server": f"https://{service_ip}:443", "tls-server-name": "kube-fault-proxy.kube-fault-proxy.svc",
                "certificate-authority": str(ca_cert)}}],
            "users": [{"name": "scheduler", "user": {"token": token}}],
            "contexts": [{"name": "kfp", "context": {"cluster": "kfp", "user": "scheduler"}}]}


@contextlib.contextmanager
def running_scheduler(kubeconfig: Path, name: str, log: Path) -> Iterator[int]:
    """A second kube-scheduler (profile `name`) whose every request goes through the Service."""
    config = kubeconfig.with_suffix(".scheduler.yaml")
    config.write_text(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)}, "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": name}]}))
    binary = build.build(build.kubernetes("kube-scheduler"))
    pid = spawn([str(binary), f"--config={config}", "--bind-address=127.0.0.1", "--secure-port=0",
                 "--pod-max-in-unschedulable-pods-duration=10s", "--v=2"], log)
    try:
        yield pid
    finally:
        stop_groups({"kube-scheduler-via-service": pid}, 5)

