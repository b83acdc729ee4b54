"""The stand-in apiserver's objects and kubeconfig, without sockets (tests/integration/test_quick_start.py serves
it for real)."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.proxy.upstream import read
from kube_fault_proxy.rig import standin
from kube_fault_proxy.rig.cluster import pki


def binding(node: str = "node-1") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Binding", "target": {"name": node}}


def test_it_starts_with_nodes_and_pending_pods() -> None:
    cluster = standin.Cluster(nodes=2, pods=3)
    assert [n["metadata"]["name"] for n in cluster.node_list()["items"]] == ["node-0", "node-1"]
    pods = cluster.pod_list("default")["items"]
    assert [p["metadata"]["name"] for p in pods] == ["pod-0", "pod-1", "pod-2"]
    assert all(p["status"]["phase"] == "Pending" and "nodeName" not in p["spec"] for p in pods)
    assert cluster.pod_list("other")["items"] == []


def test_a_pod_binds_once_and_a_second_binding_conflicts_as_the_apiserver_answers() -> None:
    cluster = standin.Cluster(nodes=1, pods=1)
    before = int(cluster.pod_list(None)["metadata"]["resourceVersion"])
    code, body = cluster.bind("default", "pod-0", binding("node-0"))
    assert (code, body["status"], body["code"]) == (201, "Success", 201)
    pod = cluster.pods[("default", "pod-0")]
    assert pod["spec"]["nodeName"] == "node-0"
    assert int(pod["metadata"]["resourceVersion"]) > before
    code, body = cluster.bind("default", "pod-0", binding("node-0"))
    assert (code, body["reason"]) == (409, "Conflict")
    assert 'already assigned to node "node-0"' in body["message"]


@pytest.mark.parametrize(("namespace", "name", "body", "code", "reason"), [
    ("default", "nope", binding(), 404, "NotFound"),
    ("elsewhere", "pod-0", binding(), 404, "NotFound"),
    ("default", "pod-0", {"target": {}}, 422, "Invalid"),
])
def test_a_binding_for_no_pod_or_no_node_is_refused(namespace: str, name: str, body: dict[str, Any], code: int,
                                                     reason: str) -> None:
    got_code, got = standin.Cluster(nodes=1, pods=1).bind(namespace, name, body)
    assert (got_code, got["reason"], got["kind"]) == (code, reason, "Status")


def test_pods_are_created_pending_once_per_name() -> None:
    cluster = standin.Cluster(nodes=1, pods=0)
    code, pod = cluster.add_pod("ns", {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c"}]}})
    assert (code, pod["metadata"]["namespace"], pod["status"]["phase"]) == (201, "ns", "Pending")
    assert cluster.add_pod("ns", {"metadata": {"name": "web"}})[0] == 409
    assert cluster.add_pod("ns", {"metadata": {}})[0] == 422


@pytest.mark.parametrize(("path", "groups"), [
    ("/api/v1/namespaces/default/pods", ("default", None, None)),
    ("/api/v1/namespaces/default/pods/pod-0", ("default", "pod-0", None)),
    ("/api/v1/namespaces/default/pods/pod-0/binding", ("default", "pod-0", "/binding")),
    ("/api/v1/namespaces/default/pods/pod-0/status", None),
    ("/api/v1/pods", None),
])
def test_the_pod_routes(path: str, groups: tuple[str | None, ...] | None) -> None:
    match = standin.POD.match(path)
    assert (match.group("ns", "name", "binding") if match else None) == groups


def test_its_kubeconfig_has_the_ca_and_a_client_certificate_and_is_private(tmp_path: Path) -> None:
    certs = pki.make(tmp_path / "pki")
    path = standin.write_kubeconfig(tmp_path / "out" / "stand-in.kubeconfig", "https://127.0.0.1:6443", certs)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    view = read(path)
    assert view.server == "https://127.0.0.1:6443"
    assert set(view.user) == {"client-certificate-data", "client-key-data"}
    assert "certificate-authority-data" in view.cluster


@pytest.mark.parametrize("listen", ["6443", "localhost:", "localhost:https"])
def test_a_bad_listen_address_is_a_usage_error(listen: str, capsys: pytest.CaptureFixture[str]) -> None:
    from kube_fault_proxy.cli.main import main

    assert main(["stand-in", "--listen", listen]) == 2
    assert f"--listen: expected HOST:PORT, got {listen!r}" in capsys.readouterr().err
