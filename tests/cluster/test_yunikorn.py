"""YuniKorn v1.9.0 (standard mode, out of cluster) through kube-fault-proxy."""

from __future__ import annotations

import httpx

from proxy.cluster.control_plane import Cluster
from tests.cluster.conftest import Control, all_running, api_client, create_pods, pods, wait_for


def test_200_pods_bound_and_the_queue_agrees(yunikorn_cluster: Cluster) -> None:
    c = yunikorn_cluster
    api = api_client(c.kubeconfig("admin"))
    control = Control(c.state["proxy"]["control"])
    before = control.stats()["requests"]
    names = create_pods(api, "default", 200, scheduler="yunikorn")
    wait_for("200 YuniKorn pods bound and Running", lambda: all_running(api, "default", names), timeout=180)
    bound = [p for p in pods(api, "default", names).values() if p.spec.node_name]
    queue = httpx.get(f"{c.state['yunikorn']}/ws/v1/partition/default/queue/root.default").json()
    assert queue["allocatedResource"]["pods"] == len(bound) == 200
    assert control.stats()["requests"] - before >= 200  # YuniKorn's binds went through the proxy
