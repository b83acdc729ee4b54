"""`cluster up|down|env`'s own code paths that need no cluster (control_plane.py): what env exports, what up
builds, and the order down stops things in (shell processes standing in for the components)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kube_fault_proxy.rig.cluster.build import kubernetes
from kube_fault_proxy.rig.cluster.control_plane import down, env, needed_components
from kube_fault_proxy.rig.cluster.processes import spawn
from kube_fault_proxy.rig.cluster.record import Cluster
from kube_fault_proxy.rig.cluster.state import ClusterState


def test_env_exports_kubectl_only_once_it_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFP_CACHE_DIR", str(tmp_path / "cache"))
    c = Cluster(tmp_path / "cluster")
    c.state = ClusterState(kubeconfigs={"admin": str(tmp_path / "admin.kubeconfig")})
    c.save()
    assert env(c.dir).splitlines() == [f"export KUBECONFIG={tmp_path / 'admin.kubeconfig'}"]
    kubectl = kubernetes("kubectl").binary
    kubectl.parent.mkdir(parents=True)
    kubectl.write_bytes(b"")
    assert env(c.dir).splitlines()[1] == f"export KFP_KUBECTL={kubectl}"


def test_up_builds_what_it_starts_and_the_kubectl_env_advertises() -> None:
    assert needed_components("none") == ["etcd", "kube-apiserver", "kube-controller-manager", "kwok", "kubectl"]
    assert needed_components("yunikorn")[-1] == "yunikorn-scheduler"


def test_down_stops_the_clients_then_the_apiserver_then_etcd(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "cluster")
    for name in ("etcd", "kube-apiserver", "kwok", "kube-scheduler"):
        log = tmp_path / f"{name}.log"
        # each logs when its SIGTERM arrives, so the order is on record
        c.record(name, spawn(["bash", "-c", f"trap 'date +%s.%N > {log}.term; exit 0' TERM; sleep 60 & wait"], log),
                 log)
    time.sleep(0.3)  # the traps are set
    stopped = down(c.dir, grace=5)
    assert stopped.terminated == ["kube-scheduler", "kwok", "kube-apiserver", "etcd"] and not stopped.killed
    at = {n: float((tmp_path / f"{n}.log.term").read_text()) for n in stopped.terminated}
    assert at["kube-scheduler"] < at["kube-apiserver"] < at["etcd"] and at["kwok"] < at["kube-apiserver"]
    assert Cluster(c.dir).state.processes == {}
    assert down(c.dir).names == []  # a second down finds nothing
