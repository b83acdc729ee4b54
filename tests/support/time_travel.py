"""Time travel for a client's informers on a real control plane: its watches dropped (a 1 s outage), its resumed
pods watch expired, and the WatchList relist that follows served from a past revision by a staleList rule."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

from kube_fault_proxy.proxy.control.client import ControlClient
from kube_fault_proxy.rig.cluster.record import Cluster

from tests.support.cluster import api_client, create_pods, make_namespace, wait_for

TRIGGER = "kfp-outage-now"  # the ConfigMap the test reads through the proxy to start the outage


def relist_through_a_stale_watch_list(c: Cluster, user_agents: str, timeout: float = 30,
                                      writes_via_proxy: bool = True) -> tuple[list[dict[str, Any]], bool, list[str]]:
    """The staleList records (`inject`) served to the client whose user agent matches, after a 1 s outage drops
    its connections (its resumed pods watch, if it resumes one, expired), whether that expire acted, and the
    resourceVersions of the three pods (of no scheduler) written first: through the proxy (their answers are
    revisions it sees) or, with `writes_via_proxy=False`, straight to the apiserver: then the proxy knows their
    revisions only from the client's own pod watch (a scheduler watches every pod; on a 1.37 apiserver a
    client-go informer's WatchList comes gzipped). A LIST rule stands by, so a client that relists with a LIST
    instead of a WatchList is journaled too (`servedAs`)."""
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    admin = api_client(c.kubeconfig("admin"))
    make_namespace(admin, namespace)
    via = api_client(c.kubeconfig("admin-via-proxy"))  # the outage's trigger goes through the proxy either way
    made = create_pods(via if writes_via_proxy else admin, namespace, 3, scheduler="kfp-nobody")
    created = [p.metadata.resource_version for p in sorted(admin.list_namespaced_pod(namespace).items,
                                                           key=lambda p: made.index(p.metadata.name))]
    pods: dict[str, Any] = {"resources": ["pods"], "userAgents": [user_agents]}
    control = ControlClient(c.control_url)
    since = control.cursor()
    control.activate("time-travel-relist", rules=[
        {"name": "outage", "match": {"verbs": ["get"], "resources": ["configmaps"], "names": [TRIGGER]},
         "when": {"maxInjections": 1}, "fault": {"outage": {"seconds": 1}}},
        {"name": "expire-pod-rewatch", "match": {**pods, "verbs": ["watch"]}, "when": {"maxInjections": 1},
         "fault": {"expire": {"onlyRewatch": True}}},
        {"name": "stale-relist", "match": {**pods, "verbs": ["watch"]}, "when": {"maxInjections": 1},
         "fault": {"staleList": {"lagWrites": 2}}},
        {"name": "stale-list", "match": {**pods, "verbs": ["list"]}, "when": {"maxInjections": 1},
         "fault": {"staleList": {"lagWrites": 2}}}])
    try:
        with contextlib.suppress(Exception):  # the outage closes this very request's connection
            via.read_namespaced_config_map(TRIGGER, namespace, _request_timeout=5)
        wait_for("the client's relist served stale",
                 lambda: any(r["fault"] == "staleList" for r in control.injections(since)), timeout)
    finally:
        control.deactivate()
    records = control.journal_after(since).records
    assert any(r["event"] == "outage-start" for r in records), "the outage began"
    expired = any(r["event"] == "inject" and r["rule"] == "expire-pod-rewatch" for r in records)
    return [r for r in control.injections(since) if r["fault"] == "staleList"], expired, created
