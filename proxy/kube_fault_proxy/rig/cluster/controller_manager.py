"""kube-controller-manager on the local control plane: which controllers, and its command line.

The controllers are the ones a scheduler test leans on: namespaces are deleted with their content,
owned objects are collected, every namespace gets its `default` ServiceAccount (so the
ServiceAccount admission plugin is on) and the token controller serves it, the root CA is
published, the node lifecycle controller lifts the `not-ready` taint once KWOK reports a node
Ready (so TaintNodesByCondition is on) and taints nodes whose leases stop (their pods evicted after
the usual 300 s toleration), and orphaned pods are collected. Workload controllers (Deployments,
Jobs, …), endpoints, volumes and cloud controllers are off: no scenario creates their objects, and
each would watch every pod of a 3,000-pod load on a 2-core machine. `cluster up --controllers`
takes any other list (kube-controller-manager's own syntax: `*` for all its defaults).
"""

from __future__ import annotations

from pathlib import Path

CONTROLLERS = ("namespace-controller", "garbage-collector-controller", "serviceaccount-controller",
               "serviceaccount-token-controller", "root-ca-certificate-publisher-controller",
               "node-lifecycle-controller", "taint-eviction-controller", "pod-garbage-collector-controller",
               "clusterrole-aggregation-controller")


def argv(binary: Path, kubeconfig: Path, pki: Path, port: int, controllers: tuple[str, ...] = CONTROLLERS) -> list[str]:
    """The command line: leader election off, the service-account signing key, loopback only."""
    return [str(binary), f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}", "--leader-elect=false", "--bind-address=127.0.0.1",
            f"--secure-port={port}", f"--controllers={','.join(controllers)}",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}", f"--cluster-signing-key-file={pki / 'ca.key'}",
            "--kube-api-qps=200", "--kube-api-burst=400"]
