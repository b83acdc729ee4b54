"""The local real control plane (kube-apiserver, etcd, real schedulers) with the proxy in front."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kube_fault_proxy.kube.kubeapi import delete_namespace, wait_namespace_gone
from kube_fault_proxy.rig.cluster.record import Cluster
from kube_fault_proxy.rig.pytest_plugin import PluginConfig
from lightkube import Client
from lightkube.resources.core_v1 import Pod

from tests.support.cluster import start_cluster, stop_cluster, wait_for

pytestmark = pytest.mark.cluster


_LEAVING: list[tuple[Cluster, str]] = []  # namespaces deleted at a test's end, perhaps not gone yet


def _no_pod_in(client: Client, namespace: str) -> bool:
    return not list(client.list(Pod, namespace=namespace, chunk_size=1))


@pytest.fixture
def namespace(kube_scheduler_cluster: Cluster) -> Iterator[str]:
    """A fresh namespace name per test (created by the test's own client), deleted with everything in
    it when the test ends, so the shared cluster carries nothing from one test to the next.

    At the end the namespace is deleted first (so that no controller can create in it again), then its
    pods at once (grace period 0: a bound pod's graceful deletion made the namespace controller wait
    10 s), and they are waited for. The namespace controller's own 5 s pause before it empties a
    namespace is waited for at the next test's start instead, which gives it one test's head start."""
    c = kube_scheduler_cluster
    with c.admin_api().client() as client:
        for name in [n for cluster, n in _LEAVING if cluster is c]:
            wait_namespace_gone(client, name)
        _LEAVING[:] = [(cluster, n) for cluster, n in _LEAVING if cluster is not c]
    name = f"t-{uuid.uuid4().hex[:8]}"
    yield name
    with c.admin_api().client() as client:
        if not delete_namespace(client, name, pods_at_once=True, wait=False):
            return  # the test made none
        # A Job's pods keep their tracking finalizer until the Job controller takes it off.
        wait_for(f"the pods of {name} gone", lambda: _no_pod_in(client, name), timeout=60, interval=0.1)
    _LEAVING.append((c, name))


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


