"""Views that reach today's clients, on the real apiserver: a write that commits after its error, and
time travel for a WatchList (kube-scheduler's pod informer relisting through a stale rule)."""

from __future__ import annotations

import time

import pytest
from kube_fault_proxy.proxy.control.client import ControlClient
from kube_fault_proxy.rig.cluster.control_plane import Cluster
from kubernetes.client.rest import ApiException

from tests.support.cluster import api_client, make_namespace, wait_for


def configmap(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": "1"}}


def test_fail_then_commit_the_client_gets_504_and_the_object_is_written_afterwards(
        kube_scheduler_cluster: Cluster, namespace: str) -> None:
    c = kube_scheduler_cluster
    direct = api_client(c.kubeconfig("admin"))
    via = api_client(c.kubeconfig("admin-via-proxy"))
    make_namespace(direct, namespace)
    control = ControlClient(c.control_url)
    since = control.cursor()
    control.activate("late-commit", rules=[{"name": "late", "match": {"verbs": ["create"], "resources": ["configmaps"],
                                                                     "namespaces": [namespace]},
                                            "fault": {"failThenCommit": {"status": 504, "commitAfterSeconds": 1.5}}}])
    try:
        t0 = time.monotonic()
        with pytest.raises(ApiException) as failed:
            via.create_namespaced_config_map(namespace, configmap("late"))
        assert failed.value.status == 504 and "Timeout" in str(failed.value.body)
        with pytest.raises(ApiException) as absent:  # read once right after the error: not there yet
            direct.read_namespaced_config_map("late", namespace)
        assert absent.value.status == 404 and time.monotonic() - t0 < 1.5
        wait_for("the late commit", lambda: any(r["event"] == "late-commit" for r in control.journal_after(since).records), 10)
    finally:
        control.deactivate()
    written = direct.read_namespaced_config_map("late", namespace)
    [late] = [r for r in control.journal_after(since).records if r["event"] == "late-commit"]
    assert (late["committed"], late["upstreamStatus"]) == (True, 201)
    assert late["resourceVersion"] == written.metadata.resource_version
