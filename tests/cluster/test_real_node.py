"""`cluster up --real-node`: a kubelet with containerd and runc beside a KWOK node, whose pods really run."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from kube_fault_proxy.rig.cluster import host_sweep, real_node
from kube_fault_proxy.rig.cluster.real_node_config import BRIDGE, NODE_IP, NODE_NAME, POD_SUBNET
from kube_fault_proxy.rig.cluster.record import Cluster
from kube_fault_proxy.rig.cluster.state import RealNodeRecord

from tests.support.cluster import api_client, kubectl, start_cluster, stop_cluster, wait_for

pytestmark = pytest.mark.cluster


def _real_node(c: Cluster) -> RealNodeRecord:
    assert c.state.real_node is not None, "no real node recorded"
    return c.state.real_node


def test_a_pod_scheduled_to_the_real_node_runs_and_down_leaves_nothing(tmp_path: Path) -> None:
    sysctls, chains = real_node.host_sysctls(), host_sweep.kube_chains()
    c = start_cluster(tmp_path / "state", "--nodes", "1", "--real-node", "--scheduler", "kube-scheduler",
                      "--timeout", "90")
    try:
        api = api_client(c.kubeconfig("admin"))
        node = api.read_node(NODE_NAME)
        assert node.metadata.labels["type"] == "real"
        assert node.status.node_info.container_runtime_version.startswith("containerd://")
        assert {a.type: a.address for a in node.status.addresses}["InternalIP"] == NODE_IP
        workload = _real_node(c).images["workload"]
        api.create_namespaced_pod("default", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "real"},
            "spec": {"nodeSelector": {"type": "real"}, "terminationGracePeriodSeconds": 1, "containers": [{
                "name": "c", "image": workload,
                "command": ["/bin/sh", "-c", "echo hello from $(hostname) on runc; exec sleep 3600"]}]}})
        wait_for("the pod Running", lambda: api.read_namespaced_pod("real", "default").status.phase == "Running",
                 timeout=60, interval=0.2)
        pod = api.read_namespaced_pod("real", "default")
        assert pod.spec.node_name == NODE_NAME  # placed there by kube-scheduler
        assert ipaddress.ip_address(pod.status.pod_ip) in ipaddress.ip_network(POD_SUBNET)  # from the CNI bridge
        # The container's stdout, read through the apiserver from the kubelet; exec into it the same way.
        wait_for("the log line", lambda: "hello from real on runc" in api.read_namespaced_pod_log("real", "default"),
                 timeout=20, interval=0.2)
        assert kubectl(c, "admin", "exec", "real", "--", "cat", "/proc/1/cmdline").startswith("sleep")
        data = Path(_real_node(c).data)
    finally:
        stop_cluster(c)
    assert host_sweep.mount_points_under(Path("/proc/self/mountinfo").read_text(), data) == []
    assert not data.exists()
    assert not Path("/sys/fs/cgroup/pids", host_sweep.KUBEPODS).exists()
    assert not Path("/sys/class/net", BRIDGE).exists()
    assert _real_node(Cluster(c.dir)).leftovers == []
    assert real_node.host_sysctls() == sysctls  # what the kubelet and the bridge plugin changed is put back
    assert host_sweep.kube_chains() == chains  # and its iptables chains (KUBE-FIREWALL, the canary) are gone
