"""watchList against the real apiserver: a WatchList whose initial-events-end BOOKMARK is withheld."""

from __future__ import annotations

import json
from typing import Any

from kube_fault_proxy.proxy.control.client import ControlClient
from kube_fault_proxy.rig.cluster.record import Cluster
from kubernetes import client as k8s

from tests.support.cluster import api_client, make_namespace

END = "k8s.io/initial-events-end"


def watch_list(api: k8s.CoreV1Api, namespace: str) -> list[dict[str, Any]]:
    """A WatchList of the namespace's ConfigMaps as client-go asks for one (sendInitialEvents, bookmarks,
    NotOlderThan the newest state), ended by the apiserver itself after 3 s."""
    answer = api.list_namespaced_config_map(namespace, watch=True, send_initial_events=True,
                                            allow_watch_bookmarks=True, resource_version_match="NotOlderThan",
                                            timeout_seconds=3, _preload_content=False)
    return [json.loads(line) for line in answer.read().splitlines() if line.strip()]


def reading(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(type, name) per event; an annotated bookmark is ("BOOKMARK", END)."""
    out = []
    for e in events:
        meta = e["object"]["metadata"]
        annotated = (meta.get("annotations") or {}).get(END) == "true"
        out.append((e["type"], END if annotated and e["type"] == "BOOKMARK" else meta.get("name", "")))
    return out


def test_a_watch_list_without_its_bookmark_shows_the_initial_events_and_no_end(kube_scheduler_cluster: Cluster,
                                                                               namespace: str) -> None:
    c = kube_scheduler_cluster
    direct = api_client(c.kubeconfig("admin"))
    via = api_client(c.kubeconfig("admin-via-proxy"))
    make_namespace(direct, namespace)
    for i in range(3):
        direct.create_namespaced_config_map(namespace, {"metadata": {"name": f"cm{i}"}, "data": {"i": str(i)}})
    control = ControlClient(c.control_url)
    since = control.cursor()
    control.activate("watchlist-withhold", rules=[{"name": "withhold", "match": {
        "verbs": ["watch"], "resources": ["configmaps"], "namespaces": [namespace]},
        "fault": {"watchList": {"mode": "withhold"}}}])
    try:
        proxied = reading(watch_list(via, namespace))
    finally:
        control.deactivate()
    straight = reading(watch_list(direct, namespace))
    initial = sorted(n for t, n in straight if t == "ADDED")
    assert {"cm0", "cm1", "cm2"} <= set(initial), straight
    assert straight[-1] == ("BOOKMARK", END) and straight.count(("BOOKMARK", END)) == 1, "the apiserver sends it"
    assert sorted(n for t, n in proxied if t == "ADDED") == initial, "every initial event reaches the client"
    assert ("BOOKMARK", END) not in proxied, proxied
    [edit] = [r for r in control.journal_after(since).records if r["event"] == "watch-event"]
    assert (edit["action"], edit["initialEvents"], edit["rule"]) == ("initial-events-end-withheld", len(initial),
                                                                     "withhold")
    assert reading(watch_list(via, namespace))[-1] == ("BOOKMARK", END), "switched off: the bookmark comes again"
