"""stallStream against the real apiserver, one test: a stalled pod watch gets no byte and no FIN for its window
(its connection answering PINGs), then the proxy ends it cleanly and a resume from its last revision gets what was
withheld from the watch cache; and a real client's own read timeout ends a stall sooner."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import urllib3
import yaml
from kube_fault_proxy.proxy.control.client import ControlClient
from kube_fault_proxy.rig.cluster.record import Cluster

from tests.support.cluster import api_client, make_namespace, pod_manifest, wait_for
from tests.support.raw_h2 import RawH2

WINDOW = 6.0


def token_of(kubeconfig: Any) -> str:
    return str(yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"])


def stall_rule(namespace: str, **stall: Any) -> list[dict[str, Any]]:
    return [{"name": "stall", "match": {"verbs": ["watch"], "resources": ["pods"], "namespaces": [namespace]},
             "fault": {"stallStream": stall}}]


def lines(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in body.splitlines() if line.strip()]


def test_a_stalled_watch_gets_no_byte_and_no_fin_until_its_window_or_the_client_ends_it(kube_scheduler_cluster: Cluster,
                                                                                       namespace: str) -> None:
    c = kube_scheduler_cluster
    assert c.proxy is not None
    api = api_client(c.kubeconfig("admin"))
    make_namespace(api, namespace)
    control = ControlClient(c.control_url)
    since = control.cursor()
    token = token_of(c.kubeconfig("admin-via-proxy"))
    rv = api.list_namespaced_pod(namespace).metadata.resource_version
    control.activate("stall-a-pod-watch", rules=stall_rule(namespace, afterEvents=1, **{"for": f"{WINDOW:g}s"}))
    try:
        watch = RawH2(c.proxy.url, str(c.proxy.ca_file))
        sid = watch.get(f"/api/v1/namespaces/{namespace}/pods?watch=1&resourceVersion={rv}&timeoutSeconds=300",
                        token)
        api.create_namespaced_pod(namespace, pod_manifest("p0"))
        watch.pump(1.5)
        [first] = lines(watch.body(sid))
        assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "p0")
        silent_from = watch.data_times(sid)[-1]
        for name in ("p1", "p2"):  # their events (and p0's binding) come during the window: withheld
            api.create_namespaced_pod(namespace, pod_manifest(name))
        pinged = time.monotonic()
        watch.ping(b"stalled!")
        watch.pump(WINDOW + 2.0 - (time.monotonic() - silent_from))
        ended = watch.ended_at(sid)
        assert ended is not None and watch.reset_at(sid) is None and watch.closed_at is None, \
            "a clean END_STREAM at the window's end; the connection stays up"
        assert not [t for t in watch.data_times(sid) if t > silent_from], "no byte of the watch in its window"
        assert WINDOW - 0.5 <= ended - silent_from <= WINDOW + 1.0, ended - silent_from
        [ack] = watch.ping_acks()
        assert ack.at - pinged < 1.0 and ack.at < ended, "the connection answered its PING during the window"
        watch.close()
    finally:
        control.deactivate()
    # The client resumes from the last revision it saw: the watch cache gives it what the stall withheld.
    resumed = RawH2(c.proxy.url, str(c.proxy.ca_file))
    sid = resumed.get(f"/api/v1/namespaces/{namespace}/pods?watch=1&timeoutSeconds=2"
                      f"&resourceVersion={first['object']['metadata']['resourceVersion']}", token)
    resumed.pump(4.0)
    names = {e["object"]["metadata"]["name"] for e in lines(resumed.body(sid))}
    resumed.close()
    assert {"p1", "p2"} <= names, names
    records = control.journal_after(since).records
    [stalled] = [r for r in records if r["event"] == "watch-event" and r.get("action") == "stalled"]
    assert stalled["rule"] == "stall" and stalled["afterEvents"] == 1
    [end] = [r for r in records if r["event"] == "stall-end"]
    assert (end["reason"], end["end"]) == ("window", "proxy") and end["withheldBytes"] > 0

    # A real client's own read timeout ends a stall sooner: the official Python client (urllib3, HTTP/1.1) with a
    # 3 s read timeout gives up on a watch held silent for a minute from its first byte (its initial events too).
    via_proxy = api_client(c.kubeconfig("admin-via-proxy"))
    since = control.cursor()
    control.activate("stall-a-pod-watch", rules=stall_rule(namespace, afterEvents=0, **{"for": "60s"}))
    try:
        t0 = time.monotonic()
        with pytest.raises(urllib3.exceptions.ReadTimeoutError):
            stream = via_proxy.list_namespaced_pod(namespace, watch=True, timeout_seconds=300,
                                                   _preload_content=False, _request_timeout=(5, 3))
            for _ in stream.stream(1024):
                pass
        gave_up = time.monotonic() - t0
        assert 2.5 <= gave_up <= 5.0, gave_up
        wait_for("the stall's end",
                 lambda: any(r["event"] == "stall-end" for r in control.journal_after(since).records), 10)
    finally:
        control.deactivate()
    [end] = [r for r in control.journal_after(since).records if r["event"] == "stall-end"]
    assert end["reason"] == "client-gone" and 2.5 <= end["stalledSeconds"] < 10 and end["withheldBytes"] > 0
