"""kube-controller-manager on the local control plane: which controllers, its command line, its start, its
restart with other feature gates, and its `kill -9` and start again (a correlated crash point).

The controllers are the ones a scheduler test leans on: namespaces are deleted with their content,
owned objects are collected, every namespace gets its `default` ServiceAccount (so the
ServiceAccount admission plugin is on) and the token controller serves it, the root CA is
published, the node lifecycle controller lifts the `not-ready` taint once KWOK reports a node
Ready (so TaintNodesByCondition is on) and taints nodes whose leases stop (their pods evicted after
the usual 300 s toleration), and orphaned pods are collected. Workload controllers (Deployments,
Jobs, …), endpoints, volumes and cloud controllers are off: no scenario creates their objects, and
each would watch every pod of a 3,000-pod load on a 2-core machine. `cluster up --controllers`
takes any other list (kube-controller-manager's own syntax: `*` for all its defaults), and
`--workload-controllers` adds WORKLOAD_CONTROLLERS, for a kube-controller-manager that is itself
the system under test (`--through-proxy kube-controller-manager`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

import httpx

from kube_fault_proxy.rig.cluster import build, feature_gates
from kube_fault_proxy.rig.cluster.processes import kill_group
from kube_fault_proxy.rig.cluster.record import Cluster, ClusterError
from kube_fault_proxy.rig.cluster.startup import on_a_free_port, say

CONTROLLERS = ("namespace-controller", "garbage-collector-controller", "serviceaccount-controller",
               "serviceaccount-token-controller", "root-ca-certificate-publisher-controller",
               "node-lifecycle-controller", "taint-eviction-controller", "pod-garbage-collector-controller",
               "clusterrole-aggregation-controller")
# The workload controllers (and what they lean on: the garbage collector above deletes what a scale-down
# or a rollout orphans). Each watches every pod: only for a run whose system under test they are.
WORKLOAD_CONTROLLERS = ("replicaset-controller", "deployment-controller", "job-controller",
                        "statefulset-controller", "daemonset-controller")


def argv(binary: Path, kubeconfig: Path, pki: Path, port: int, controllers: tuple[str, ...] = CONTROLLERS,
         gates: list[str] | None = None, authentication_kubeconfig: Path | None = None) -> list[str]:
    """The command line: leader election off, the service-account signing key, loopback only; `gates` is its
    --feature-gates flag, if any. The controllers use `kubeconfig` (the proxy's, when kube-controller-manager is
    under test); its own serving endpoint's delegated authentication goes by `authentication_kubeconfig`. With a
    workload controller on (kube-controller-manager under test), log level 2: each ReplicaSet decision is logged
    with the replicas it acted on ("Too few replicas" need=10 creating=10), what tells a race from a breach."""
    auth = authentication_kubeconfig or kubeconfig
    return [str(binary), f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={auth}",
            f"--authorization-kubeconfig={auth}", "--leader-elect=false", "--bind-address=127.0.0.1",
            f"--secure-port={port}", f"--controllers={','.join(controllers)}",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}", f"--cluster-signing-key-file={pki / 'ca.key'}",
            "--kube-api-qps=200", "--kube-api-burst=400",
            *(["--v=2"] if set(controllers) & set(WORKLOAD_CONTROLLERS) else []), *(gates or [])]


def start(c: Cluster, binary: Path, controllers: tuple[str, ...], gates: list[str], via_proxy: bool,
          timeout: float) -> None:
    """Start it on a free port with these controllers and its --feature-gates flag (`gates`), its controllers'
    kubeconfig the proxy's when `via_proxy`, and wait until it answers healthy."""
    log = c.log("kube-controller-manager")

    def start_on(port: int) -> int:
        command = argv(binary, c.kubeconfig("controller-manager-via-proxy" if via_proxy else "controller-manager"),
                       c.dir / "pki", port, controllers, gates,
                       authentication_kubeconfig=c.kubeconfig("controller-manager"))
        return c.start("kube-controller-manager", command, log)
    on_a_free_port("kube-controller-manager", start_on,
                   lambda port: httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=1).text == "ok",
                   log, timeout)
    say("  kube-controller-manager ready" + (" (through the proxy)" if via_proxy else ""))


def regate_controller_manager(c: Cluster, gates: Mapping[str, bool], timeout: float = 120.0) -> float:
    """Restart kube-controller-manager with these feature gates of its own and the controllers `up` gave it
    (through the proxy if it was): another target of the same build on the same control plane; its target
    follows. Returns the seconds the restart took."""
    t0 = time.monotonic()
    controllers = c.state.controllers
    if "kube-controller-manager" not in c.state.processes or controllers is None:
        raise ClusterError(f"no kube-controller-manager to restart with other gates in {c.dir}")
    c.forget("kube-controller-manager")
    all_gates = {**c.feature_gates, "kube-controller-manager": dict(gates)}
    c.state.feature_gates = {k: g for k, g in all_gates.items() if g}
    built = f"kube-controller-manager {c.state.builds['kube-controller-manager']}"
    c.state.targets["kube-controller-manager"] = feature_gates.target(
        built, all_gates, "kube-controller-manager")
    c.save()
    binary = build.build(build.kubernetes("kube-controller-manager", c.state.builds["kube-controller-manager"]),
                         say=False)
    start(c, binary, tuple(controllers), feature_gates.flag(all_gates, "kube-controller-manager"),
          c.via_proxy("kube-controller-manager"), timeout)
    c.save()
    return time.monotonic() - t0


def kill_controller_manager(c: Cluster) -> int:
    """`kill -9` kube-controller-manager's process group (no SIGTERM: a crash); returns its pid.
    `start_controller_manager` starts the same build again."""
    proc = c.state.processes.get("kube-controller-manager")
    if proc is None:
        raise ClusterError(f"no kube-controller-manager to kill in {c.dir}")
    if not kill_group(proc.pid):
        raise ClusterError(f"kube-controller-manager (pid {proc.pid}) still runs after SIGKILL")
    c.state.processes.pop("kube-controller-manager")
    c.save()
    return proc.pid


def start_controller_manager(c: Cluster, timeout: float = 120.0) -> float:
    """Start the same kube-controller-manager build again, with the controllers and gates `up` gave it (through the
    proxy if it was), and wait until it is healthy; returns the seconds it took."""
    t0 = time.monotonic()
    controllers = c.state.controllers
    if "kube-controller-manager" in c.state.processes or controllers is None:
        raise ClusterError(f"kube-controller-manager is running, or was never started, in {c.dir}")
    binary = build.build(build.kubernetes("kube-controller-manager", c.state.builds["kube-controller-manager"]),
                         say=False)
    start(c, binary, tuple(controllers), feature_gates.flag(c.feature_gates, "kube-controller-manager"),
          c.via_proxy("kube-controller-manager"), timeout)
    c.save()
    return time.monotonic() - t0
