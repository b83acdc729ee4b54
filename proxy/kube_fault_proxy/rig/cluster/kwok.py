"""KWOK on the local control plane: the fake Nodes it manages, its configuration, its start, and waiting for them.

KWOK (sigs.k8s.io/kwok, as in the seed's kind + KWOK reproduction) plays every kubelet: it
initialises each Node annotated `kwok.x-k8s.io/node: fake` (conditions, addresses, node info; the
capacity we give is kept), renews its Lease in kube-node-lease, and moves the pods bound there
through KWOK's "fast" stages: Running and Ready with containerStatuses and a pod IP from the node's
podCIDR, and deleted once a deletion is asked (graceful deletion finished, as a kubelet would).
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from kube_fault_proxy.kube.informer import Informer, Obj
from kube_fault_proxy.kube.kubeapi import Kube, Node
from kube_fault_proxy.paths import private_dir, write_private
from kube_fault_proxy.rig.cluster import build
from kube_fault_proxy.rig.cluster.record import Cluster, ClusterError
from kube_fault_proxy.rig.cluster.startup import on_a_free_port, say, tail

MANAGED = "kwok.x-k8s.io/node"  # the annotation KWOK's docs put on the nodes it manages
POD_NETWORK = ipaddress.ip_network("10.128.0.0/9")  # one /24 per node, like --allocate-node-cidrs
NODE_LEASE_SECONDS = 40  # what a kubelet uses (and KWOK's default)


@dataclass(frozen=True)
class NodeShape:
    """What every fake node offers."""

    cpu: str = "16"
    memory: str = "64Gi"
    pods: int = 110


def node_name(i: int) -> str:
    """The i-th fake node's name (1-based)."""
    return f"kfp-node-{i:04d}"


def pod_cidr(i: int) -> str:
    """The i-th node's pod range: a /24 of POD_NETWORK (KWOK hands out pod IPs from it)."""
    return f"{POD_NETWORK.network_address + (i - 1) * 256}/24"


def node_manifest(i: int, shape: NodeShape) -> dict[str, Any]:
    """A Node for KWOK to manage: labels as a kubelet sets them, capacity, no conditions yet (KWOK's)."""
    name = node_name(i)
    resources = {"cpu": shape.cpu, "memory": shape.memory, "pods": str(shape.pods)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {MANAGED: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                         "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                    "kubernetes.io/arch": "amd64", "kubernetes.io/role": "agent", "type": "kwok"}},
            "spec": {"podCIDR": pod_cidr(i), "podCIDRs": [pod_cidr(i)]},
            "status": {"capacity": resources, "allocatable": resources}}


def configuration(stages: Path, server_address: str, parallelism: int = 16) -> str:
    """KWOK's --config: its options, then KWOK's own fast stages (node-fast, lease heartbeat, pod-fast)."""
    options = {"apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
               "options": {"manageNodesWithAnnotationSelector": f"{MANAGED}=fake", "nodeIP": "127.0.0.1",
                           "serverAddress": server_address, "enableDebuggingHandlers": False,
                           "enableProfilingHandler": False, "nodeLeaseDurationSeconds": NODE_LEASE_SECONDS,
                           "podPlayStageParallelism": parallelism, "nodePlayStageParallelism": parallelism,
                           "nodeLeaseParallelism": parallelism}}
    return yaml.safe_dump(options, sort_keys=False) + "---\n" + stages.read_text()


def ready(node: Obj) -> bool:
    """Ready=True and no NoSchedule taint left (the node lifecycle controller lifts `not-ready`)."""
    conditions = {c.get("type"): c.get("status") for c in node.get("status", {}).get("conditions") or []}
    taints = [t for t in node.get("spec", {}).get("taints") or [] if t.get("effect") == "NoSchedule"]
    return conditions.get("Ready") == "True" and not taints


def lease_age(lease: Obj, now: datetime.datetime | None = None) -> float:
    """Seconds since a node Lease was last renewed."""
    renewed = datetime.datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))
    return ((now or datetime.datetime.now(datetime.UTC)) - renewed).total_seconds()


async def _until_ready(kube: Kube, count: int, timeout: float) -> int:
    async with kube.async_client() as client:
        done = asyncio.Event()
        informer = Informer(client, Node, labels={"type": "kwok"})

        def seen(_kind: str, _node: Obj) -> None:
            if sum(1 for n in informer.store.values() if ready(n)) >= count:
                done.set()

        informer.on_change = seen
        task = asyncio.create_task(informer.run())
        try:
            await asyncio.wait_for(done.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return sum(1 for n in informer.store.values() if ready(n))


def wait_nodes_ready(kube: Kube, count: int, timeout: float) -> int:
    """Watch the fake nodes until `count` are Ready and untainted, or timeout; how many are."""
    return asyncio.run(_until_ready(kube, count, timeout))


def start(c: Cluster, binary: Path, nodes: int, shape: NodeShape, timeout: float) -> None:
    """Start KWOK on a free port and wait until `nodes` fake nodes are Ready and untainted."""
    t0 = time.monotonic()
    workdir = private_dir(c.dir / "kwok")
    log = c.log("kwok")

    def start_on(port: int) -> int:
        config = write_private(workdir / "kwok.yaml", configuration(build.kwok_stages(), f"127.0.0.1:{port}"))
        # KWOK_WORKDIR: KWOK reads no ~/.kwok of the user's; only this configuration.
        return c.start("kwok", [str(binary), f"--kubeconfig={c.kubeconfig('kwok')}", f"--config={config}"], log,
                       env={**os.environ, "KWOK_WORKDIR": str(workdir)})
    on_a_free_port("kwok", start_on,
                   lambda port: httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200,
                   log, timeout)
    count = wait_nodes_ready(c.admin_api(), nodes, timeout)
    if count < nodes:
        raise ClusterError(f"only {count} of {nodes} nodes became Ready and untainted after {timeout:.0f}s "
                           f"(KWOK initialises them, kube-controller-manager lifts their not-ready taint); see {log} "
                           f"and {c.log('kube-controller-manager')}:\n{tail(log)}")
    say(f"  {nodes} KWOK nodes Ready ({shape.cpu} cpu, {shape.memory}, {shape.pods} pods each; "
        f"{time.monotonic() - t0:.1f}s)")
