"""Views that reach today's clients, on the real apiserver: a write that commits after its error, time
travel for a WatchList (kube-scheduler's pod informer relisting through a stale rule), and two views served to
two connections (twoViews), a reconnect moving a client to the older one."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kube_fault_proxy.proxy.control.client import ControlClient
from kube_fault_proxy.rig.cluster.record import Cluster
from kubernetes.client import CoreV1Api
from kubernetes.client.rest import ApiException

from tests.support.cluster import (
    all_running,
    api_client,
    create_pods,
    make_namespace,
    start_cluster,
    stop_cluster,
    wait_for,
)

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
    end = next(i for i, e in enumerate(events) if e["type"] == "BOOKMARK"
               and (e["object"]["metadata"].get("annotations") or {}).get("k8s.io/initial-events-end") == "true")
    initial = sorted(e["object"]["metadata"]["name"] for e in events[:end] if e["type"] == "ADDED")
    assert [n for n in initial if n != "kube-root-ca.crt"] == ["doomed", "early"], events
    assert {e["type"] for e in events[:end]} == {"ADDED"}
    assert events[end]["object"]["metadata"]["resourceVersion"] == before
    after = [(e["type"], e["object"]["metadata"]["name"], e["object"]["metadata"]["resourceVersion"])
             for e in events[end + 1:] if e["type"] != "BOOKMARK"]
    assert [(t, n) for t, n, _ in after if n != "kube-root-ca.crt"] == [("ADDED", "late"), ("DELETED", "doomed")], events
    assert after[0][2] == late.metadata.resource_version and [int(r) for _, _, r in after] == sorted(
        int(r) for _, _, r in after), "the hidden writes replay in order"
    [served] = control.injections(since)
    assert (served["servedAs"], served["servedResourceVersion"], served["writesSince"]) == ("watchlist", before, 2)


def client_as(kubeconfig: Path, agent: str) -> CoreV1Api:
    """A client of its own (its own connection pool: its own connection to the proxy) with this user agent."""
    api = api_client(kubeconfig)
    api.api_client.user_agent = agent
    return api


def test_two_views_two_connections_see_two_apiservers_and_a_reconnect_goes_back_in_time(
        kube_scheduler_cluster: Cluster, namespace: str) -> None:
    """Two clients, one connection each, pinned to the two views (the current state, 2 writes back); the client on
    the current view reconnects, lands on the lagging view and lists an older revision than it had seen."""
    c = kube_scheduler_cluster
    via = c.kubeconfig("admin-via-proxy")
    make_namespace(api_client(c.kubeconfig("admin")), namespace)
    control = ControlClient(c.control_url)
    since = control.cursor()
    control.activate("two-apiservers", rules=[{
        "name": "two-views", "match": {"verbs": ["list"], "resources": ["configmaps"], "namespaces": [namespace]},
        "fault": {"twoViews": {"lagWrites": 2}}}])
    try:
        writer = api_client(via)  # its writes pass the proxy, which counts them; the rule matches no write
        for i in range(3):
            writer.create_namespaced_config_map(namespace, configmap(f"cm-{i}"))
        agents = ("twoviews-a", "twoviews-b")
        lists = {agent: client_as(via, agent).list_namespaced_config_map(namespace) for agent in agents}
        pinned = [r for r in control.journal_after(since).records if r["event"] == "view-pinned"]
        assert [(r["client"], r["clientConnection"]) for r in pinned] == [(a, 1) for a in agents]
        assert sorted(r["view"] for r in pinned) == [0, 1], "two clients: one on each view"
        fresh = next(r["client"] for r in pinned if r["view"] == 0)
        lagging = next(r["client"] for r in pinned if r["view"] == 1)
        seen = int(lists[fresh].metadata.resource_version)
        assert {m.metadata.name for m in lists[fresh].items} >= {"cm-0", "cm-1", "cm-2"}
        assert int(lists[lagging].metadata.resource_version) < seen
        assert "cm-2" not in {m.metadata.name for m in lists[lagging].items}
        # The client on the current view reconnects (a new connection), lands on the other apiserver: back in time.
        back = client_as(via, fresh).list_namespaced_config_map(namespace)
    finally:
        control.deactivate()
    assert int(back.metadata.resource_version) < seen, "a reconnect went back in time"
    names = {m.metadata.name for m in back.items}
    assert "cm-0" in names and "cm-2" not in names
    records = control.journal_after(since).records
    reconnect = [r for r in records if r["event"] == "view-pinned"][2]
    assert (reconnect["client"], reconnect["view"], reconnect["clientConnection"]) == (fresh, 1, 2)
    assert len({r["connection"] for r in records if r["event"] == "view-pinned"}) == 3
    served = [r for r in records if r["event"] == "inject" and r["fault"] == "twoViews"]
    assert [(r["request"]["userAgent"], r["view"], r["viewLag"]) for r in served] == [
        (lagging, 1, {"lagWrites": 2}), (fresh, 1, {"lagWrites": 2})]
    assert [r["servedResourceVersion"] for r in served] == [lists[lagging].metadata.resource_version,
                                                             back.metadata.resource_version]


@pytest.fixture(scope="module")
def time_travel_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A control plane of this test's own: after a stale WatchList, kube-scheduler v1.36.3 logs "Scheduler cache
    is corrupted" and, seen once after the other tests here, scheduled no new pod for 25 s; the shared one must
    not inherit that (an open question, kept for its own issue)."""
    c = start_cluster(tmp_path_factory.mktemp("time-travel"), "--nodes", "5", "--scheduler", "kube-scheduler",
                      "--proxy")
    yield c
    stop_cluster(c)


def test_kube_schedulers_pod_informer_relists_through_a_stale_watch_list(time_travel_cluster: Cluster) -> None:
    """The first Binding drops the scheduler's apiserver connection, its pods re-watch is ended and the next
    one expired (the shipped watch-expire-pods profile), so client-go 1.36 relists its pods through a
    WatchList: served from 3 pod writes back, the writes after it replay and every pod still runs."""
    c = time_travel_cluster
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    api = api_client(c.kubeconfig("admin"))
    make_namespace(api, namespace)
    control = ControlClient(c.control_url)
    since = control.cursor()
    pods_watch = {"verbs": ["watch"], "resources": ["pods"]}
    control.activate("time-travel-scheduler", rules=[
        {"name": "drop-at-first-bind", "match": BIND, "when": {"maxInjections": 1}, "fault": {"resetUpstream": {}}},
        {"name": "end-next-pods-watch", "match": pods_watch,
         "when": {"maxInjections": 1, "trigger": {"match": BIND, "count": 1}}, "fault": {"cut": {"afterSeconds": 1}}},
        {"name": "expire-pod-rewatch", "match": pods_watch, "when": {"maxInjections": 1},
         "fault": {"expire": {"onlyRewatch": True}}},
        {"name": "stale-relist", "match": pods_watch, "when": {"maxInjections": 1},
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
    # Older than what the apiserver holds now. Not always older than the newest revision the proxy had seen:
    # a Binding's answer is a Status with no revision, so binds whose events had not come yet are counted in
    # writesSince after the newest revision seen (the served one may be that revision).
    assert int(served["servedResourceVersion"]) <= int(served["newestResourceVersion"])
    newest_now = max(int(p.metadata.resource_version) for p in api.list_namespaced_pod(namespace).items)
    assert int(served["servedResourceVersion"]) < newest_now
    assert served["initialEvents"] >= 0 and served["pages"] >= 1
