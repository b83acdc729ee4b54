"""KWOK's side of the control plane without processes: node manifests, its configuration, readiness,
and the fast stages taken from its module at build time."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import pytest
import yaml
from kube_fault_proxy.rig.cluster import build, kwok
from kube_fault_proxy.rig.cluster.gomod import kustomized_documents, restated_gomod


def test_every_node_gets_a_pod_range_of_its_own() -> None:
    cidrs = [kwok.pod_cidr(i) for i in range(1, 1001)]
    assert cidrs[:2] == ["10.128.0.0/24", "10.128.1.0/24"] and cidrs[255:257] == ["10.128.255.0/24", "10.129.0.0/24"]
    nets = [ipaddress.ip_network(c) for c in cidrs]
    assert len(set(nets)) == 1000 and all(n.subnet_of(kwok.POD_NETWORK) for n in nets)  # type: ignore[arg-type]


def test_a_node_is_annotated_for_kwok_with_the_shape_asked_and_no_conditions() -> None:
    node = kwok.node_manifest(7, kwok.NodeShape(cpu="8", memory="32Gi", pods=50))
    assert node["metadata"]["name"] == "kfp-node-0007"
    assert node["metadata"]["annotations"][kwok.MANAGED] == "fake"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "kfp-node-0007"
    assert node["status"] == {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "50"},
                              "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "50"}}
    assert node["spec"]["podCIDR"] == "10.128.6.0/24"
    assert "conditions" not in node["status"]  # KWOK's node-initialize stage reports them


def test_the_configuration_selects_the_annotated_nodes_and_carries_the_stages(tmp_path: Path) -> None:
    stages = tmp_path / "stage-fast.yaml"
    stages.write_text("kind: Stage\nmetadata: {name: node-initialize}\n---\nkind: Stage\nmetadata: {name: pod-ready}\n")
    docs = list(yaml.safe_load_all(kwok.configuration(stages, "127.0.0.1:1234")))
    options = docs[0]["options"]
    assert docs[0]["kind"] == "KwokConfiguration"
    assert options["manageNodesWithAnnotationSelector"] == "kwok.x-k8s.io/node=fake"
    assert options["serverAddress"] == "127.0.0.1:1234" and options["nodeIP"] == "127.0.0.1"
    assert options["enableDebuggingHandlers"] is False and options["nodeLeaseDurationSeconds"] == 40
    assert [d["metadata"]["name"] for d in docs[1:]] == ["node-initialize", "pod-ready"]


def _node(ready: str | None, taints: list[dict[str, str]] | None = None) -> dict[str, object]:
    conditions = [] if ready is None else [{"type": "MemoryPressure", "status": "False"},
                                           {"type": "Ready", "status": ready}]
    return {"spec": {"taints": taints or []}, "status": {"conditions": conditions}}


NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}


@pytest.mark.parametrize(("node", "expected"), [
    (_node("True"), True),
    (_node(None, [NOT_READY]), False),  # as created: TaintNodesByCondition taints it, KWOK has not run yet
    (_node("True", [NOT_READY]), False),  # KWOK reported Ready, the node lifecycle controller has not lifted it
    (_node("True", [{"key": "x", "effect": "NoExecute"}]), True),
    (_node("False"), False),
    (_node("Unknown"), False),
])
def test_a_node_is_ready_once_ready_and_no_longer_tainted(node: dict[str, object], expected: bool) -> None:
    assert kwok.ready(node) is expected


def test_lease_age() -> None:
    now = datetime.datetime(2026, 12, 1, 12, 0, 30, tzinfo=datetime.UTC)
    assert kwok.lease_age({"spec": {"renewTime": "2026-12-01T12:00:20.500000Z"}}, now) == 9.5


def test_the_stages_are_the_documents_a_kustomization_names(tmp_path: Path) -> None:
    (tmp_path / "fast").mkdir()
    for d, files in {"node": ["a.yaml"], "pod": ["b.yaml", "c.yaml"]}.items():
        (tmp_path / d).mkdir()
        (tmp_path / d / "kustomization.yaml").write_text(yaml.safe_dump({"resources": files}))
        for f in files:
            (tmp_path / d / f).write_text(f"name: {f}\n")
    (tmp_path / "fast" / "kustomization.yaml").write_text(yaml.safe_dump({"resources": ["../node", "../pod"]}))
    assert kustomized_documents(tmp_path / "fast") == ["name: a.yaml", "name: b.yaml", "name: c.yaml"]


def test_kwoks_module_is_restated_with_its_own_requirements() -> None:
    gomod = ("module sigs.k8s.io/kwok\n\ngo 1.24.0\n\nrequire (\n\tk8s.io/api v0.33.0\n\tgithub.com/a/b v1.0.0 // x\n)\n"
             "\nrequire (\n\tgithub.com/c/d v0.1.0 // indirect\n)\n")
    out = restated_gomod("kfpkwok", "sigs.k8s.io/kwok", gomod, "v0.7.0")
    assert out.splitlines() == ["module kfpkwok", "", "go 1.24.0", "", "require sigs.k8s.io/kwok v0.7.0", "",
                                "require (", "\tk8s.io/api v0.33.0", "\tgithub.com/a/b v1.0.0",
                                "\tgithub.com/c/d v0.1.0", ")"]


def test_kwok_and_the_controller_manager_are_built_like_the_rest() -> None:
    assert build.ALL["kwok"].package == "sigs.k8s.io/kwok/cmd/kwok" and build.ALL["kwok"].version == "v0.7.0"
    assert build.ALL["kube-controller-manager"].package == "k8s.io/kubernetes/cmd/kube-controller-manager"
    assert build.kwok_stages() == build.ALL["kwok"].binary.parent / "stage-fast.yaml"
