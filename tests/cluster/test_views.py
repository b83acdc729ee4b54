"""Views that reach today's clients, on the real apiserver: a write that commits after its error, and
time travel for a WatchList (kube-scheduler's pod informer relisting through a stale rule)."""

from __future__ import annotations

import json
import time

import pytest
from kube_fault_proxy.proxy.control.client import ControlClient
from kube_fault_proxy.rig.cluster.control_plane import Cluster
from kubernetes.client.rest import ApiException

from tests.support.cluster import all_running, api_client, create_pods, make_namespace, wait_for

BIND = {"verbs": ["create"], "resources": ["pods"], "subresources": ["binding"]}


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


def test_a_stale_watch_list_is_the_list_at_the_revision_then_the_writes_after_it_in_order(
        kube_scheduler_cluster: Cluster, namespace: str) -> None:
    c = kube_scheduler_cluster
    via = api_client(c.kubeconfig("admin-via-proxy"))  # the proxy sees its writes' answers pass
    make_namespace(api_client(c.kubeconfig("admin")), namespace)
    for name in ("early", "doomed"):
        via.create_namespaced_config_map(namespace, configmap(name))
    control = ControlClient(c.control_url)
    since = control.cursor()
    control.activate("time-travel", rules=[{"name": "stale", "match": {"verbs": ["watch"], "resources": ["configmaps"],
                                                                    "namespaces": [namespace]},
                                            "fault": {"staleList": {"lagWrites": 2}}}])
    try:
        late = via.create_namespaced_config_map(namespace, configmap("late"))
        via.delete_namespaced_config_map("doomed", namespace)
        answer = via.list_namespaced_config_map(namespace, watch=True, send_initial_events=True,
                                                allow_watch_bookmarks=True, resource_version_match="NotOlderThan",
                                                timeout_seconds=2, _preload_content=False)
        events = [json.loads(line) for line in answer.read().splitlines() if line]
    finally:
        control.deactivate()
    before = str(int(late.metadata.resource_version) - 1)
    mine = [(e["type"], e["object"]["metadata"].get("name")) for e in events
            if e["object"]["metadata"].get("name") != "kube-root-ca.crt"
            and not (e["type"] == "BOOKMARK" and e is not events_end(events))]
    assert mine == [("ADDED", "early"), ("ADDED", "doomed"), ("BOOKMARK", None), ("ADDED", "late"),
                    ("DELETED", "doomed")], events
    assert events_end(events)["object"]["metadata"]["resourceVersion"] == before
    assert [e["object"]["metadata"]["resourceVersion"] for e in events if e["type"] in ("ADDED", "DELETED")
            and e["object"]["metadata"]["name"] == "late"] == [late.metadata.resource_version]
    [served] = control.injections(since)
    assert (served["servedAs"], served["servedResourceVersion"], served["writesSince"]) == ("watchlist", before, 2)


def events_end(events: list[dict[str, object]]) -> dict[str, object]:
    """The BOOKMARK that ends the initial events."""
    return next(e for e in events if e["type"] == "BOOKMARK"
                and (e["object"]["metadata"].get("annotations") or {}).get("k8s.io/initial-events-end"))  # type: ignore[index]


def test_kube_schedulers_pod_informer_relists_through_a_stale_watch_list(
        kube_scheduler_cluster: Cluster, namespace: str) -> None:
    """The first Binding drops the scheduler's apiserver connection; client-go 1.36 relists its pods through a
    WatchList, served from 3 pod writes back; the writes after it replay and every pod still runs."""
    c = kube_scheduler_cluster
    api = api_client(c.kubeconfig("admin"))
    make_namespace(api, namespace)
    control = ControlClient(c.control_url)
    since = control.cursor()
    control.activate("time-travel-scheduler", rules=[
        {"name": "drop-at-first-bind", "match": BIND, "when": {"maxInjections": 1}, "fault": {"resetUpstream": {}}},
        {"name": "stale-relist", "match": {"verbs": ["watch"], "resources": ["pods"]}, "when": {"maxInjections": 1},
         "fault": {"staleList": {"lagWrites": 3}}}])
    try:
        names = create_pods(api, namespace, 3)
        wait_for("the stale WatchList", lambda: any(r["fault"] == "staleList" for r in control.injections(since)), 30)
    finally:
        control.deactivate()
    wait_for("every pod running after the replay", lambda: all_running(api, namespace, names), 60)
    [served] = [r for r in control.injections(since) if r["fault"] == "staleList"]
    assert served["servedAs"] == "watchlist" and served["writesSince"] == 3
    assert "kube-scheduler" in served["request"]["userAgent"] and served["request"]["sendInitialEvents"] is True
    assert int(served["servedResourceVersion"]) < int(served["newestResourceVersion"])
    assert served["initialEvents"] >= 0 and served["pages"] >= 1
