"""KWOK on the real control plane: what it does to the fake nodes and to the pods bound to them."""

from __future__ import annotations

import datetime
import ipaddress
import time

from kube_fault_proxy.proxy.control.client import ControlClient
from kube_fault_proxy.rig.cluster.kwok import NODE_LEASE_SECONDS, lease_age
from kube_fault_proxy.rig.cluster.record import Cluster
from kubernetes import client as k8s

from tests.support.cluster import all_running, api_client, kubectl, make_namespace, pod_manifest, wait_for


def test_pods_bound_through_the_proxy_run_ready_with_container_statuses(kube_scheduler_cluster: Cluster,
                                                                        namespace: str) -> None:
    c = kube_scheduler_cluster
    api = api_client(c.kubeconfig("admin"))
    make_namespace(api, namespace)
    control = ControlClient(c.control_url)
    before = control.stats()["bindsTotal"]["succeeded"]
    names = [f"kw-{i}" for i in range(20)]
    for name in names:
        pod = pod_manifest(name)
        pod["spec"]["containers"].append({"name": "sidecar", "image": "registry.k8s.io/pause:3.10"})
        api.create_namespaced_pod(namespace, pod)
    wait_for("20 pods Running", lambda: all_running(api, namespace, names), timeout=120)
    assert control.stats()["bindsTotal"]["succeeded"] - before == 20  # each bound through the proxy
    nodes = {n.metadata.name: n for n in api.list_node().items}
    for pod in api.list_namespaced_pod(namespace).items:
        conditions = {cond.type: cond.status for cond in pod.status.conditions}
        assert conditions["Ready"] == conditions["ContainersReady"] == conditions["Initialized"] == "True", pod.status
        statuses = {s.name: s for s in pod.status.container_statuses}
        assert set(statuses) == {"c", "sidecar"}
        assert all(s.ready and s.state.running.started_at and s.restart_count == 0 for s in statuses.values())
        pod_range = ipaddress.ip_network(nodes[pod.spec.node_name].spec.pod_cidr)
        assert ipaddress.ip_address(pod.status.pod_ip) in pod_range, (pod.status.pod_ip, pod_range)
        assert pod.status.host_ip == "127.0.0.1" and pod.status.start_time
    table = kubectl(c, "admin", "get", "pods", "-n", namespace, "--no-headers").splitlines()
    assert len(table) == 20 and all(row.split()[1:3] == ["2/2", "Running"] for row in table), table


def test_a_kwok_node_stays_ready_with_fresh_leases(kube_scheduler_cluster: Cluster) -> None:
    c = kube_scheduler_cluster
    api = api_client(c.kubeconfig("admin"))
    leases_api = k8s.CoordinationV1Api(api.api_client)

    def leases() -> dict[str, k8s.V1Lease]:
        return {lease.metadata.name: lease for lease in leases_api.list_namespaced_lease("kube-node-lease").items}

    first = leases()
    nodes = api.list_node().items
    assert {n.metadata.name for n in nodes} == set(first) and len(first) == 50
    now = datetime.datetime.now(datetime.UTC)
    assert len({lease.spec.holder_identity for lease in first.values()}) == 1  # one KWOK holds them all
    for lease in first.values():
        assert lease.spec.lease_duration_seconds == NODE_LEASE_SECONDS
        assert lease_age({"spec": {"renewTime": lease.spec.renew_time.isoformat()}}, now) < NODE_LEASE_SECONDS
    for node in nodes:
        conditions = {cond.type: cond for cond in node.status.conditions}
        assert conditions["Ready"].status == "True" and conditions["Ready"].reason == "KubeletReady", conditions
        assert {conditions[t].status for t in ("MemoryPressure", "DiskPressure", "PIDPressure")} == {"False"}
        assert not node.spec.taints  # the node lifecycle controller lifted TaintNodesByCondition's not-ready
        assert node.status.node_info.kubelet_version == "kwok-0.7.0"
        assert node.status.allocatable == {"cpu": "16", "memory": "64Gi", "pods": "110"}
    time.sleep(15)  # KWOK renews a lease every 10 s (a quarter of its duration, as a kubelet does)
    later = leases()
    renewed = [n for n in first if later[n].spec.renew_time > first[n].spec.renew_time]
    assert len(renewed) == 50, sorted(set(first) - set(renewed))
    assert all(cond.status == "True" for n in api.list_node().items for cond in n.status.conditions
               if cond.type == "Ready")
