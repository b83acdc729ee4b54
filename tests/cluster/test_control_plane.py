"""`cluster up|down|status|env` as a user runs them: every component stopped by process group, the
state private, no path exported that does not exist."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kube_fault_proxy.rig.cluster.processes import live_groups
from kube_fault_proxy.rig.cluster.record import Cluster

from tests.support.cluster import kfp, start_cluster
from tests.support.processes import ROOT

COMPONENTS = ["etcd", "kube-apiserver", "kube-controller-manager", "kwok", "kube-fault-proxy", "kube-scheduler"]


def test_down_stops_every_component_by_process_group_and_a_second_down_finds_nothing(tmp_path: Path) -> None:
    c = start_cluster(tmp_path / "small", "--nodes", "3", "--proxy", "--scheduler", "kube-scheduler")
    groups = {name: p.pid for name, p in c.processes.items()}
    assert list(groups) == COMPONENTS
    assert live_groups(set(groups.values())) == set(groups.values())
    r = kfp("cluster", "--state-dir", str(c.dir), "status")
    assert r.returncode == 0, r.stdout
    r = kfp("cluster", "--state-dir", str(c.dir), "down")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [f"stopped: {', '.join(reversed(COMPONENTS))}"]  # none needed SIGKILL
    assert live_groups(set(groups.values())) == set()
    r = kfp("cluster", "--state-dir", str(c.dir), "down")
    assert r.returncode == 0 and r.stdout.strip() == "stopped: nothing was running", r.stdout
    r = kfp("cluster", "--state-dir", str(c.dir), "status")
    assert r.returncode == 1  # nothing is up


def test_a_hung_apiserver_is_killed_after_the_grace_and_down_says_so(tmp_path: Path) -> None:
    c = start_cluster(tmp_path / "hung", "--nodes", "2")
    groups = {name: p.pid for name, p in c.processes.items()}
    os.kill(groups["kube-apiserver"], signal.SIGSTOP)  # stopped: SIGTERM stays pending, only SIGKILL ends it
    r = kfp("cluster", "--state-dir", str(c.dir), "down", "--grace", "3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["stopped: kwok, kube-controller-manager, etcd, kube-apiserver",
                                     "needed SIGKILL after 3s: kube-apiserver"]
    assert live_groups(set(groups.values())) == set()


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Two nodes and the proxy, for the tests that only read what `up` left."""
    c = start_cluster(tmp_path_factory.mktemp("small") / "private", "--nodes", "2", "--proxy")
    yield c
    assert kfp("cluster", "--state-dir", str(c.dir), "down").returncode == 0


def test_env_exports_only_paths_that_exist_and_kubectl_works(small: Cluster) -> None:
    r = kfp("cluster", "--state-dir", str(small.dir), "env")
    assert r.returncode == 0, r.stderr
    exports = dict(line.removeprefix("export ").split("=", 1) for line in r.stdout.splitlines())
    assert {"KUBECONFIG", "KFP_KUBECTL", "KFP_PROXY_KUBECONFIG", "KFP_CONTROL_URL"} <= set(exports)
    paths = {k: Path(v) for k, v in exports.items() if v.startswith("/")}
    assert [k for k, p in paths.items() if not p.exists()] == []
    nodes = subprocess.run([exports["KFP_KUBECTL"], "get", "nodes", "-o", "name"], capture_output=True, text=True,
                           env={**os.environ, "KUBECONFIG": exports["KUBECONFIG"]}, timeout=60)
    assert nodes.stdout.split() == ["node/kfp-node-0001", "node/kfp-node-0002"], nodes.stderr


@pytest.mark.parametrize("scheduler", ["bogus"])
def test_unknown_scheduler_is_a_usage_error(scheduler: str, tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "kube_fault_proxy", "cluster", "--state-dir", str(tmp_path), "up",
                        "--scheduler", scheduler], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "invalid choice: 'bogus'" in r.stderr


def test_cluster_state_is_private_and_no_token_is_on_a_command_line(small: Cluster) -> None:
    state = small.dir
    assert state.stat().st_mode & 0o777 == 0o700
    for name in ("cluster.json", "tokens.csv", "pki/ca.key", "pki/apiserver.key", "pki/sa.key",
                 "kubeconfigs/admin.kubeconfig", "kubeconfigs/scheduler-via-proxy.kubeconfig",
                 "kubeconfigs/kwok.kubeconfig", "kubeconfigs/controller-manager.kubeconfig", "kwok/kwok.yaml"):
        assert (state / name).stat().st_mode & 0o777 == 0o600, name
    tokens = list(small.state.tokens.values())
    assert len(tokens) == 5  # admin, kube-scheduler, YuniKorn, kube-controller-manager, KWOK
    for proc in small.processes.values():
        argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
        assert not [t for t in tokens if t.encode() in argv], proc
