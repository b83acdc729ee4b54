"""Watch and connection faults against the real apiserver, seen by real informers and clients."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kube_fault_proxy.proxy.control.client import ControlClient
from kube_fault_proxy.rig.cluster.record import Cluster
from kubernetes import client as k8s
from kubernetes import watch
from kubernetes.client.rest import ApiException

from tests.support.cluster import (
    all_running,
    api_client,
    create_pods,
    kubectl,
    make_namespace,
    pods,
    wait_for,
)

BIND = {"verbs": ["create"], "resources": ["pods"], "subresources": ["binding"]}


def relists(stats: dict[str, Any]) -> int:
    by = stats["requestsByResource"]
    return int(by.get("list pods", 0) + by.get("watch pods (sendInitialEvents)", 0))


def test_expire_makes_the_schedulers_informer_relist(kube_scheduler_cluster: Cluster, namespace: str) -> None:
    c = kube_scheduler_cluster
    api = api_client(c.kubeconfig("admin"))
    make_namespace(api, namespace)
    control = ControlClient(c.control_url)
    since = control.cursor()
    control.http.post("/v1/stats/reset").raise_for_status()
    control.activate("watch-expire-pods")  # the shipped profile
    try:
        names = create_pods(api, namespace, 3)
        wait_for("the expired pods watch", lambda: any(r["fault"] == "expire" for r in control.injections(since)), 60)
        wait_for("a relist of pods right after it", lambda: relists(control.stats()) >= 2, 30)
    finally:
        control.deactivate()
    wait_for("pods bound after the relist", lambda: all_running(api, namespace, names), 90)
    faults = [r["fault"] for r in control.injections(since)]
    assert faults == ["resetUpstream", "cut", "expire"]


class Reflector:
    """A minimal informer on the official Python client: list, then watch from the last
    resourceVersion, re-watching whenever the stream ends; relist on 410."""

    def __init__(self, api: k8s.CoreV1Api, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.view: dict[str, str] = {}
        self.watches = 0
        self.stop = threading.Event()

    def run(self) -> None:
        rv = self._list()
        while not self.stop.is_set():
            self.watches += 1
            try:
                for event in watch.Watch().stream(self.api.list_namespaced_pod, self.namespace,
                                                  resource_version=rv, timeout_seconds=60):
                    pod = event["object"]
                    rv = pod.metadata.resource_version
                    if event["type"] == "DELETED":
                        self.view.pop(pod.metadata.name, None)
                    else:
                        self.view[pod.metadata.name] = pod.metadata.resource_version
                    if self.stop.is_set():
                        return
            except ApiException as e:
                if e.status == 410:
                    rv = self._list()

    def _list(self) -> str:
        got = self.api.list_namespaced_pod(self.namespace)
        self.view = {p.metadata.name: p.metadata.resource_version for p in got.items}
        return str(got.metadata.resource_version)


def test_cut_watches_lose_no_event(kube_scheduler_cluster: Cluster, namespace: str) -> None:
    c = kube_scheduler_cluster
    direct = api_client(c.kubeconfig("admin"))
    make_namespace(direct, namespace)
    control = ControlClient(c.control_url)
    control.activate("cut-2s", rules=[{"name": "cut", "match": {"verbs": ["watch"], "namespaces": [namespace]},
                                 "fault": {"cut": {"afterSeconds": 2}}}])
    reflector = Reflector(api_client(c.kubeconfig("admin-via-proxy")), namespace)
    t = threading.Thread(target=reflector.run, daemon=True)
    t.start()
    try:
        for i in range(8):
            create_pods(direct, namespace, 3, prefix=f"cut{i}")
            time.sleep(0.8)
        truth = {p.metadata.name: p.metadata.resource_version for p in direct.list_namespaced_pod(namespace).items}
        wait_for("the reflector to catch up", lambda: reflector.view == truth, 30)
    finally:
        reflector.stop.set()
        control.deactivate()
    assert reflector.watches >= 3  # the watch really was cut and resumed, several times
    assert len(truth) == 24


def test_dropped_modified_events_never_reach_the_proxied_client(kube_scheduler_cluster: Cluster, namespace: str) -> None:
    c = kube_scheduler_cluster
    direct = api_client(c.kubeconfig("admin"))
    via = api_client(c.kubeconfig("admin-via-proxy"))
    make_namespace(direct, namespace)
    control = ControlClient(c.control_url)
    control.activate("drop-mod", rules=[{"name": "drop", "match": {"verbs": ["watch"], "resources": ["pods"],
                                                             "namespaces": [namespace]},
                                   "fault": {"dropEvents": {"events": {"types": ["MODIFIED"]}}}}])
    seen: dict[str, list[str]] = {"direct": [], "proxied": []}

    def watch_into(name: str, api: k8s.CoreV1Api) -> None:
        for event in watch.Watch().stream(api.list_namespaced_pod, namespace, timeout_seconds=8):
            seen[name].append(event["type"])

    threads = [threading.Thread(target=watch_into, args=a) for a in (("direct", direct), ("proxied", via))]
    try:
        for t in threads:
            t.start()
        time.sleep(1)
        names = create_pods(direct, namespace, 4)  # binding and KWOK modify each pod
        for n in names:
            direct.patch_namespaced_pod(n, namespace, {"metadata": {"labels": {"touched": "yes"}}})
        for t in threads:
            t.join(15)
    finally:
        control.deactivate()
    assert seen["direct"].count("MODIFIED") >= 4
    assert "MODIFIED" not in seen["proxied"]
    assert seen["proxied"].count("ADDED") == seen["direct"].count("ADDED") == 4


def test_outage_during_a_bind_burst_then_the_scheduler_recovers(kube_scheduler_cluster: Cluster, namespace: str) -> None:
    c = kube_scheduler_cluster
    api = api_client(c.kubeconfig("admin"))
    make_namespace(api, namespace)
    control = ControlClient(c.control_url)
    since = control.cursor()
    control.activate("outage-at-bind-20", rules=[{
        "name": "outage", "match": {**BIND, "namespaces": [namespace]},
        "when": {"trigger": {"match": {**BIND, "namespaces": [namespace]}, "count": 20}, "maxInjections": 1},
        "fault": {"outage": {"seconds": 5}}}])
    try:
        names = create_pods(api, namespace, 60)
        wait_for("every pod bound and Running after the outage", lambda: all_running(api, namespace, names), 120)
    finally:
        control.deactivate()
    records = control.http.get("/v1/journal", params={"since": since, "limit": 10000}).json()["records"]
    start = next(r for r in records if r["event"] == "outage-start")
    end = next(r for r in records if r["event"] == "outage-end")
    assert start["clientConnectionsClosed"] >= 1 and start["match"] == 20
    assert end["time"] - start["time"] >= 4.5
    log = c.log("kube-scheduler").read_text().splitlines()
    failed = [line for line in log if "Error scheduling pod; retrying" in line and namespace in line]
    assert failed, "the scheduler never saw the outage"  # binds in flight failed
    assert {"newConnectionsRefused", "upstreamConnectsFailed"} <= set(end)
    assert len({p.spec.node_name for p in pods(api, namespace, names).values()}) > 5
    nodes = kubectl(c, "admin-via-proxy", "get", "nodes", "-o", "name")  # a brand-new connection works
    assert nodes.count("node/") == 50


def configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": "1"}}


def test_a_stale_list_is_the_state_at_its_revision_and_a_watch_from_it_replays_what_came_after(
        kube_scheduler_cluster: Cluster, namespace: str) -> None:
    c = kube_scheduler_cluster
    direct = api_client(c.kubeconfig("admin"))
    via = api_client(c.kubeconfig("admin-via-proxy"))  # the proxy sees its writes' answers pass
    make_namespace(direct, namespace)
    rv = {}
    for name in ("old", "doomed"):
        rv[name] = int(via.create_namespaced_config_map(namespace, configmap(name)).metadata.resource_version)
    control = ControlClient(c.control_url)
    since = control.cursor()
    # The two writes the proxy will have seen last hidden: the revision just before the first of them.
    control.activate("stale-cms", rules=[{"name": "stale", "match": {"verbs": ["list", "get"], "resources": ["configmaps"],
                                                                  "namespaces": [namespace]},
                                    "fault": {"staleList": {"lagWrites": 2}}}])
    try:
        changed = via.patch_namespaced_config_map("old", namespace, {"data": {"v": "2"}})
        created = via.create_namespaced_config_map(namespace, configmap("new"))
        direct.delete_namespaced_config_map("doomed", namespace)  # a write the proxy does not see
        now = {cm.metadata.name: cm.metadata.resource_version for cm in direct.list_namespaced_config_map(namespace).items}
        stale = via.list_namespaced_config_map(namespace)
        got_doomed = via.read_namespaced_config_map("doomed", namespace)  # deleted now: there then
        with pytest.raises(ApiException) as missing:
            via.read_namespaced_config_map("new", namespace)  # there now: not yet then
    finally:
        control.deactivate()
    assert "doomed" not in now and now["old"] == changed.metadata.resource_version and "new" in now
    seen = {cm.metadata.name: int(cm.metadata.resource_version) for cm in stale.items}
    before = str(int(changed.metadata.resource_version) - 1)
    assert stale.metadata.resource_version == before
    assert {k: v for k, v in seen.items() if k != "kube-root-ca.crt"} == {"old": rv["old"], "doomed": rv["doomed"]}
    assert got_doomed.metadata.resource_version == str(rv["doomed"]) and got_doomed.data == {"v": "1"}
    assert missing.value.status == 404
    served = control.injections(since)
    assert [r["servedResourceVersion"] for r in served] == [before] * 3
    assert [r.get("servedAs") for r in served] == [None, "list", "list"]
    assert all(r["writesSince"] == 2 and r["newestResourceVersion"] == created.metadata.resource_version for r in served)
    # A watch from the stale list's revision: the apiserver replays everything after it, in order.
    replayed: list[tuple[str, str, int]] = []
    for event in watch.Watch().stream(via.list_namespaced_config_map, namespace, resource_version=str(rv["doomed"]),
                                      timeout_seconds=2):
        cm = event["object"]
        replayed.append((event["type"], cm.metadata.name, int(cm.metadata.resource_version)))
    mine = [e for e in replayed if e[1] != "kube-root-ca.crt"]
    assert [(t, n) for t, n, _ in mine] == [("MODIFIED", "old"), ("ADDED", "new"), ("DELETED", "doomed")], replayed
    assert [r for _, _, r in mine] == sorted(r for _, _, r in mine)
    assert mine[0][2] == int(changed.metadata.resource_version) and mine[1][2] == int(created.metadata.resource_version)


def test_stale_list_counts_a_delete_answered_with_a_status_so_hide_2_hides_exactly_2(
        kube_scheduler_cluster: Cluster, namespace: str) -> None:
    """The issue's reproduction: early and doomed created, then late created and doomed deleted (a Status
    without a revision), all through the proxy; hiding 2 writes shows early and doomed."""
    c = kube_scheduler_cluster
    via = api_client(c.kubeconfig("admin-via-proxy"))
    make_namespace(api_client(c.kubeconfig("admin")), namespace)
    for name in ("early", "doomed"):
        via.create_namespaced_config_map(namespace, configmap(name))
    control = ControlClient(c.control_url)
    since = control.cursor()
    control.activate("stale-cms", rules=[{"name": "stale", "match": {"verbs": ["list"], "resources": ["configmaps"],
                                                                  "namespaces": [namespace]},
                                          "fault": {"staleList": {"lagWrites": 2}}}])
    try:
        late = via.create_namespaced_config_map(namespace, configmap("late"))
        via.delete_namespaced_config_map("doomed", namespace)
        stale = via.list_namespaced_config_map(namespace)
    finally:
        control.deactivate()
    assert sorted(cm.metadata.name for cm in stale.items if cm.metadata.name != "kube-root-ca.crt") == [
        "doomed", "early"]
    assert stale.metadata.resource_version == str(int(late.metadata.resource_version) - 1)
    [served] = control.injections(since)
    assert served["writesSince"] == 2 and served["servedResourceVersion"] == stale.metadata.resource_version


def expected_from(events: list[tuple[str, str, str, int]]) -> list[tuple[str, str, int]]:
    """What coalescing delivers of one window's events (type, name, uid, rv): each object's latest state, typed
    for a client that knew the objects whose first event was not ADDED; added-and-deleted ones never seen."""
    first: dict[str, str] = {}
    last: dict[str, tuple[str, str, int]] = {}
    for kind, name, uid, rv in events:
        first.setdefault(uid, kind)
        last[uid] = (kind, name, rv)
    out = []
    for uid, (kind, name, rv) in last.items():
        known = first[uid] != "ADDED"
        if kind == "DELETED" and not known:
            continue
        out.append(("DELETED" if kind == "DELETED" else "MODIFIED" if known else "ADDED", name, rv))
    return sorted(out, key=lambda e: e[2])


def test_a_coalesced_watch_delivers_latest_states_never_stale_ones_in_resource_version_order(
        kube_scheduler_cluster: Cluster, namespace: str) -> None:
    c = kube_scheduler_cluster
    direct = api_client(c.kubeconfig("admin"))
    via = api_client(c.kubeconfig("admin-via-proxy"))
    make_namespace(direct, namespace)
    direct.create_namespaced_config_map(namespace, configmap("known"))
    start = str(direct.list_namespaced_config_map(namespace).metadata.resource_version)
    control = ControlClient(c.control_url)
    since = control.cursor()
    control.activate("coalesce-cms", rules=[{"name": "coalesce", "match": {"verbs": ["watch"], "resources": ["configmaps"],
                                                                        "namespaces": [namespace]},
                                       "fault": {"coalesceEvents": {"windowSeconds": 3}}}])
    got: dict[str, list[tuple[str, str, str, int]]] = {"direct": [], "proxied": []}
    ended: dict[str, float] = {}
    t0 = time.monotonic()

    def watch_into(who: str, api: k8s.CoreV1Api) -> None:
        # The proxied watch asks for 10 s; the proxy lowers it to the window (3 s). The direct one sees every event.
        for event in watch.Watch().stream(api.list_namespaced_config_map, namespace, resource_version=start,
                                          timeout_seconds=10 if who == "proxied" else 5):
            cm = event["object"]
            got[who].append((event["type"], cm.metadata.name, cm.metadata.uid, int(cm.metadata.resource_version)))
        ended[who] = time.monotonic() - t0

    threads = [threading.Thread(target=watch_into, args=a) for a in (("direct", direct), ("proxied", via))]
    try:
        for t in threads:
            t.start()
        direct.patch_namespaced_config_map("known", namespace, {"data": {"v": "2"}})
        direct.create_namespaced_config_map(namespace, configmap("blink"))
        direct.delete_namespaced_config_map("blink", namespace)
        direct.create_namespaced_config_map(namespace, configmap("steady"))
        for v in range(2, 5):
            direct.patch_namespaced_config_map("steady", namespace, {"data": {"v": str(v)}})
        for t in threads:
            t.join(20)
    finally:
        control.deactivate()
    mine = [e for e in got["direct"] if e[1] != "kube-root-ca.crt"]
    assert [(k, n) for k, n, _, _ in mine] == [("MODIFIED", "known"), ("ADDED", "blink"), ("DELETED", "blink"),
                                              ("ADDED", "steady")] + [("MODIFIED", "steady")] * 3, got["direct"]
    proxied = [(k, n, rv) for k, n, _, rv in got["proxied"]]
    assert proxied == expected_from(got["direct"]), (got["proxied"], got["direct"])
    steady = mine[-1][3]
    assert ("ADDED", "steady", steady) in proxied and not any(n == "blink" for _, n, _ in proxied)
    assert [rv for _, _, rv in proxied] == sorted({rv for _, _, rv in proxied})
    assert 2.5 <= ended["proxied"] <= 8, ended  # the apiserver ended it at the window, not at the client's 10 s
    [record] = [r for r in control.journal_after(since).records
                if r["event"] == "watch-event" and r.get("action") == "coalesced" and r["rule"] == "coalesce"]
    assert (record["held"], record["delivered"]) == (len(got["direct"]), len(proxied)), record
    assert record["elided"] == len(got["direct"]) - len(proxied) and record["reason"] in ("end", "window")
