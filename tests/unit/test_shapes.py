"""Workload shapes: exact fills sum to every node's allocatable, each shape's planned placement is legal."""

from __future__ import annotations

import contextlib
import typing
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.proxy.profiles.loader import ProfileError
from kube_fault_proxy.rig.cluster.kwok import NodeShape, node_manifest, node_name
from kube_fault_proxy.rig.invariants.safety import check_safety
from kube_fault_proxy.rig.runs import scenario
from kube_fault_proxy.rig.workloads import load
from kube_fault_proxy.rig.workloads.shapes import (
    ALL_SHAPES,
    GANG_LABEL,
    GANG_SIZES,
    POOL_LABEL,
    SCENARIO_SHAPES,
    SIZES,
    TAINT_KEY,
    TIGHT,
    Workload,
    generate,
    node_patches,
)

SIZES_TABLE = [(5, 60), (20, 200), (3, 20), (1, 20), (7, 23), (20, 20)]


def objects(w: Workload) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The nodes as KWOK's patched to the shape, and the pods bound as planned."""
    nodes = []
    for i, spec in enumerate(w.nodes, 1):
        node = node_manifest(i, NodeShape())
        body, status = node_patches(spec, node)
        node["metadata"]["labels"].update({k: v for k, v in body["metadata"]["labels"].items() if v is not None})
        node["spec"]["taints"] = body["spec"]["taints"] or []
        node["status"] = status["status"]
        nodes.append(node)
    pods = []
    spec = load.LoadSpec(count=len(w.pods), namespace="s-t0-1", pods=w.pods)  # as the search and scenarios load it
    for j, on in enumerate(w.placement):
        manifest = load.pod_manifest(spec, f"p{j}", j)
        manifest["spec"]["nodeName"] = node_name(on + 1)
        manifest["status"] = {"phase": "Running"}
        pods.append(manifest)
    return nodes, pods


@pytest.mark.parametrize("shape", ALL_SHAPES)
@pytest.mark.parametrize(("nodes", "pods"), SIZES_TABLE)
def test_every_shape_has_a_legal_placement(shape: str, nodes: int, pods: int) -> None:
    w = generate(shape, nodes, pods, seed=3)
    assert len(w.nodes) == nodes and len(w.pods) == len(w.placement) == pods
    node_objs, pod_objs = objects(w)
    assert check_safety(pod_objs, node_objs, {}) == []


@pytest.mark.parametrize(("nodes", "pods"), SIZES_TABLE)
def test_exact_fill_pods_sum_to_every_nodes_allocatable(nodes: int, pods: int) -> None:
    w = generate("exact-fill", nodes, pods, seed=1)
    for i, node in enumerate(w.nodes):
        mine = [p for p, on in zip(w.pods, w.placement, strict=True) if on == i]
        if not mine:  # fewer pods than nodes: an empty node keeps one slot
            continue
        assert (sum(p.cpu_m for p in mine), sum(p.memory_mi for p in mine), len(mine)) == \
            (node.cpu_m, node.memory_mi, node.pods)


def test_exact_fill_has_no_room_for_one_more_pod() -> None:
    w = generate("exact-fill", 5, 60, seed=1)
    node_objs, pod_objs = objects(w)
    extra = dict(pod_objs[0], metadata={**pod_objs[0]["metadata"], "name": "extra", "uid": "extra"})
    assert {v.invariant for v in check_safety([*pod_objs, extra], node_objs, {})} == {"no-overcommit"}  # cpu, memory, pods


def test_mixed_sizes_leave_every_node_one_largest_pod_short_of_full() -> None:
    w = generate("mixed", 5, 60, seed=2)
    assert len({p.cpu_m for p in w.pods}) > 1
    for i, node in enumerate(w.nodes):
        used = sum(p.cpu_m for p, on in zip(w.pods, w.placement, strict=True) if on == i)
        assert node.cpu_m - used == max(SIZES)


def test_tainted_pools_select_and_tolerate_their_nodes_only() -> None:
    w = generate("tainted", 6, 60, seed=5)
    special = [i for i, n in enumerate(w.nodes) if n.labels.get(POOL_LABEL) == "special"]
    assert special == [0, 1] and all(w.nodes[i].taints[0]["key"] == TAINT_KEY for i in special)
    for p, on in zip(w.pods, w.placement, strict=True):
        assert (on in special) == bool(p.node_selector) == bool(p.tolerations)
    assert 0 < sum(1 for p in w.pods if p.tolerations) < 60


def test_anti_affinity_pairs_require_different_nodes() -> None:
    w = generate("anti-affinity", 5, 61, seed=1)
    pairs: dict[str, list[int]] = {}
    for p, on in zip(w.pods, w.placement, strict=True):
        if p.anti_affinity:
            pairs.setdefault(p.anti_affinity, []).append(on)
    assert len(pairs) == 30 and all(len(set(v)) == 2 for v in pairs.values())
    node_objs, pod_objs = objects(w)
    a, b = (p for p in pod_objs if p["metadata"]["labels"].get("kube-fault-proxy/pair") == "p0")
    b["spec"]["nodeName"] = a["spec"]["nodeName"]
    assert "no-anti-affinity-breach" in {v.invariant for v in check_safety(pod_objs, node_objs, {})}


def test_one_pair_cannot_share_one_node_so_a_single_node_gets_none() -> None:
    assert not any(p.anti_affinity for p in generate("anti-affinity", 1, 20, seed=1).pods)


def test_the_same_arguments_give_the_same_workload_and_unknown_shapes_are_refused() -> None:
    for shape in TIGHT:
        assert generate(shape, 5, 60, 9) == generate(shape, 5, 60, 9)
    with pytest.raises(ValueError, match="unknown workload shape 'full'"):
        generate("full", 5, 60, 1)
    with pytest.raises(ValueError):
        generate("roomy", 0, 60, 1)


def test_node_patches_drop_a_stale_shape_and_keep_other_taints() -> None:
    roomy = generate("roomy", 1, 20, 1).nodes[0]
    cordon = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    node = {"metadata": {"labels": {POOL_LABEL: "special", "type": "kwok"}},
            "spec": {"taints": [cordon, {"key": TAINT_KEY, "value": "special", "effect": "NoSchedule"}]}}
    body, status = node_patches(roomy, node)
    assert body == {"metadata": {"labels": {POOL_LABEL: None}}, "spec": {"taints": [cordon]}}
    assert status["status"]["allocatable"] == {"cpu": "16000m", "memory": "65536Mi", "pods": "110"}


def test_a_shaped_loads_pods_carry_their_shapes_requests_labels_and_constraints() -> None:
    w = generate("tainted", 6, 30, 3)
    spec = load.LoadSpec(count=30, cpu="1", memory="1Gi", pods=w.pods)
    special = next(j for j, p in enumerate(w.pods) if p.node_selector)
    pod = load.pod_manifest(spec, "p", special)
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "500m", "memory": "1000Mi"}
    assert pod["spec"]["nodeSelector"] == {POOL_LABEL: "special"} and pod["spec"]["tolerations"][0]["key"] == TAINT_KEY
    assert pod["metadata"]["labels"][load.LOAD_LABEL] == spec.run_id
    plain = load.pod_manifest(load.LoadSpec(cpu="1", memory="1Gi"), "p")
    assert plain["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert "nodeSelector" not in plain["spec"] and "affinity" not in plain["spec"]
    pair = load.pod_manifest(load.LoadSpec(count=4, pods=generate("anti-affinity", 2, 4, 1).pods), "p", 1)
    assert pair["spec"]["affinity"]["podAntiAffinity"] and pair["metadata"]["labels"]
    with pytest.raises(ValueError, match="one pod spec per pod: 30 specs for 10 pods"):
        load.LoadSpec(count=10, pods=w.pods)


def test_a_scenarios_load_names_a_shape_and_takes_no_cpu_or_memory_beside_one(tmp_path: Path) -> None:
    assert typing.get_args(scenario.Shape) == SCENARIO_SHAPES == (*ALL_SHAPES, "yunikorn-gang")
    path = tmp_path / "s.yaml"
    head = "apiVersion: kube-fault-proxy/v1\nkind: Scenario\nmetadata: {name: s}\nspec:\n  load: "
    path.write_text(head + "{count: 10, shape: exact-fill}\n")
    assert scenario.load_scenario(path).spec.load.shape == "exact-fill"
    path.write_text(head + "{count: 10}\n")
    assert scenario.load_scenario(path).spec.load.shape == "roomy"
    for body, expected in [("{shape: full}", "s.yaml:5:17: spec.load.shape: Input should be 'roomy', 'exact-fill'"),
                           ("{shape: mixed, cpu: 500m}", "spec.load: cpu and memory come from the shape 'mixed'")]:
        path.write_text(head + body + "\n")
        with pytest.raises(ProfileError) as e:
            scenario.load_scenario(path)
        assert any(expected in str(p) for p in e.value.problems), [str(p) for p in e.value.problems]


class FakeNodes:
    """A Kube whose client lists these nodes and records merge patches (Node and Node.Status)."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.nodes, self.patches = nodes, []  # type: list[dict[str, Any]], list[tuple[str, str, dict[str, Any]]]

    @contextlib.contextmanager
    def client(self) -> Iterator[FakeNodes]:
        yield self

    def list(self, kind: Any) -> list[dict[str, Any]]:
        return list(self.nodes)

    def patch(self, kind: Any, name: str, body: dict[str, Any], patch_type: Any = None) -> None:
        self.patches.append(("status" if "status" in body else "node", name, body))


def test_a_shaped_block_shapes_every_node_and_puts_each_back_as_it_was() -> None:
    nodes = [node_manifest(i, NodeShape()) for i in (1, 2, 3)]
    nodes[1]["spec"]["taints"] = [{"key": "other", "effect": "NoSchedule"}]
    kube = FakeNodes(nodes)
    with load.shaped(kube, "roomy", 30, 1) as none:  # type: ignore[arg-type]
        assert none is None and kube.patches == []
    with load.shaped(kube, "tainted", 30, 1) as w:  # type: ignore[arg-type]
        assert w is not None and len(w.nodes) == 3 and sum(1 for p in w.pods if p.node_selector)
        assert len(kube.patches) == 6  # metadata/spec and status of each node
        shaped = len(kube.patches)
    back = kube.patches[shaped:]
    assert [(k, n) for k, n, _ in back] == [(k, node_name(i)) for i in (1, 2, 3) for k in ("node", "status")]
    assert back[2][2] == {"metadata": {"labels": {POOL_LABEL: None}},
                          "spec": {"taints": [{"key": "other", "effect": "NoSchedule"}]}}
    assert back[1][2]["status"]["allocatable"] == nodes[0]["status"]["allocatable"]
    with pytest.raises(RuntimeError), load.shaped(kube, "exact-fill", 6, 1):  # type: ignore[arg-type]
        raise RuntimeError("the run failed")
    assert len(kube.patches) == 4 * shaped and kube.patches[-6:] == back  # shaped again, and put back all the same


@pytest.mark.parametrize(("nodes", "pods"), SIZES_TABLE)
@pytest.mark.parametrize("seed", [1, 2, 7])
def test_gang_pods_fill_the_nodes_in_gangs_of_two_to_four_each_with_its_podgroup(nodes: int, pods: int,
                                                                                 seed: int) -> None:
    w = generate("gang", nodes, pods, seed)
    members: dict[str, int] = {}
    for p in w.pods:
        assert p.gang is not None and p.labels == {GANG_LABEL: p.gang}
        assert p.spec_fields() == {"schedulingGroup": {"podGroupName": p.gang}}
        members[p.gang] = members.get(p.gang, 0) + 1
    assert [name for name, _ in w.gangs] == list(members)  # a PodGroup for each gang, in creation order
    for name, min_count in w.gangs:
        size = members[name]
        assert (2 <= size <= GANG_SIZES[1] + 1) or pods == 1  # a lone last pod joins the gang before it
        assert min_count in (size, size - 1) and (min_count == size or size >= 3) and min_count >= 1
    filled = generate("exact-fill", nodes, pods, seed).nodes  # any packing of unit pods fits, one slot to spare
    assert [(n.cpu_m, n.pods) for n in w.nodes] == [(f.cpu_m + 500, f.pods + 1) for f in filled]
    order = [p.gang for p in w.pods]
    assert order == sorted(order, key=lambda g: int(str(g)[1:]))  # a gang's members come one after another


def test_some_gangs_wait_for_fewer_than_all_their_members() -> None:
    short = whole = 0
    for seed in range(10):
        w = generate("gang", 4, 40, seed)
        sizes = Counter(p.gang for p in w.pods)
        short += sum(1 for name, count in w.gangs if count < sizes[name])
        whole += sum(1 for name, count in w.gangs if count == sizes[name])
    assert short and whole > short
