"""The local real control plane (kube-apiserver, etcd, real schedulers) with the proxy in front."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kube_fault_proxy.kube.kubeapi import delete_namespace
from kube_fault_proxy.rig.cluster.record import Cluster
from kube_fault_proxy.rig.pytest_plugin import PluginConfig

from tests.support.cluster import start_cluster, stop_cluster

pytestmark = pytest.mark.cluster


@pytest.fixture
def namespace(kube_scheduler_cluster: Cluster) -> Iterator[str]:
    """A fresh namespace name per test (created by the test's own client), deleted with everything in
    it when the test ends (kube-controller-manager's namespace controller), so the shared cluster
    carries nothing from one test to the next."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    yield name
    with kube_scheduler_cluster.admin_api().client() as client:
        delete_namespace(client, name)


def release(kfp_config: PluginConfig) -> list[str]:
    """`--kubernetes VERSION` when the session asks for a release (--kube-fault-proxy-kubernetes), else nothing."""
    return ["--kubernetes", kfp_config.kubernetes] if kfp_config.kubernetes else []


@pytest.fixture(scope="session")
def kube_scheduler_cluster(tmp_path_factory: pytest.TempPathFactory, kfp_config: PluginConfig) -> Iterator[Cluster]:
    """50 KWOK nodes, kube-scheduler through the proxy: one for every test module that needs no
    fresh one (each test works in a namespace of its own, deleted after it)."""
    c = start_cluster(tmp_path_factory.mktemp("ks-cluster"), "--nodes", "50", "--scheduler", "kube-scheduler",
                      "--proxy", *release(kfp_config))
    yield c
    stop_cluster(c)


@pytest.fixture(scope="module")
def yunikorn_cluster(tmp_path_factory: pytest.TempPathFactory, kfp_config: PluginConfig) -> Iterator[Cluster]:
    """50 fake nodes, YuniKorn through the proxy (against the session's Kubernetes release)."""
    c = start_cluster(tmp_path_factory.mktemp("yk-cluster"), "--nodes", "50", "--scheduler", "yunikorn", "--proxy",
                      *release(kfp_config))
    yield c
    stop_cluster(c)


