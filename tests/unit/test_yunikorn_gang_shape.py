"""The yunikorn-gang shape: what a YuniKorn user writes for gang scheduling, as the shim (v1.9.0) reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kube_fault_proxy.proxy.profiles.loader import ProfileError
from kube_fault_proxy.rig.runs import scenario
from kube_fault_proxy.rig.workloads import load
from kube_fault_proxy.rig.workloads.shapes import ALL_SHAPES, ROOMY_NODE, YG_CPU_M, YUNIKORN_GANG, generate

YK = "yunikorn.apache.org/"


def manifests(nodes: int, pods: int) -> tuple[load.LoadSpec, list[dict[str, object]]]:
    w = generate(YUNIKORN_GANG, nodes, pods, seed=1)
    spec = load.LoadSpec(count=pods, namespace="g", scheduler_name="yunikorn", pods=w.pods)
    return spec, [load.pod_manifest(spec, f"p{j}", j) for j in range(pods)]


def test_every_pod_is_an_application_of_its_own_whose_gang_cannot_fit() -> None:
    w = generate(YUNIKORN_GANG, 2, 5, seed=1)
    assert w.nodes == (ROOMY_NODE, ROOMY_NODE) and len(w.pods) == len(w.placement) == 5
    groups = [p.task_group for p in w.pods]
    assert all(g is not None for g in groups)
    assert len({g.app for g in groups if g}) == 5
    for p in w.pods:
        g = p.task_group
        assert g is not None and (g.min_member, g.timeout_s, g.style) == (3, 3, "Hard")
        assert (p.cpu_m, p.memory_mi) == (g.cpu_m, g.memory_mi)  # the pod replaces a placeholder of its own size
    # one placeholder fits on each 16-cpu node, two never share one: the gang is always one node short
    assert ROOMY_NODE.cpu_m // YG_CPU_M == 1 and all(g.min_member == len(w.nodes) + 1 for g in groups if g)
    assert generate(YUNIKORN_GANG, 4, 1, seed=2).pods[0].task_group.min_member == 5  # type: ignore[union-attr]


def test_its_pods_carry_the_label_and_annotations_the_shim_reads() -> None:
    spec, pods = manifests(2, 3)
    apps = [p["metadata"]["labels"]["applicationId"] for p in pods]  # type: ignore[index]
    assert apps == [f"{spec.run_id}-g0", f"{spec.run_id}-g1", f"{spec.run_id}-g2"]  # unique to this load
    for p in pods:
        notes = p["metadata"]["annotations"]  # type: ignore[index]
        groups = json.loads(notes[f"{YK}task-groups"])
        # cache.GetTaskGroupsFromAnnotation: a JSON list; name, minMember (above 0) and minResource required
        assert groups == [{"name": "members", "minMember": 3, "minResource": {"cpu": "12000m", "memory": "1024Mi"}}]
        assert notes[f"{YK}task-group-name"] == groups[0]["name"]  # utils.GetTaskGroupFromPodSpec
        # cache.GetSchedulingPolicyParam: space-separated key=value pairs
        params = dict(kv.split("=") for kv in notes[f"{YK}schedulingPolicyParameters"].split(" "))
        assert params == {"placeholderTimeoutInSeconds": "3", "gangSchedulingStyle": "Hard"}
        assert p["spec"]["schedulerName"] == "yunikorn"  # type: ignore[index]
        assert p["spec"]["containers"][0]["resources"]["requests"] == groups[0]["minResource"]  # type: ignore[index]
        assert p["metadata"]["labels"][load.LOAD_LABEL] == spec.run_id  # type: ignore[index]


def test_other_shapes_pods_have_no_gang_annotations() -> None:
    pod = load.pod_manifest(load.LoadSpec(count=1, app_id="a"), "p")
    assert "annotations" not in pod["metadata"] and pod["metadata"]["labels"]["applicationId"] == "a"


def test_the_search_never_draws_it_and_a_scenario_runs_it_on_yunikorn_only(tmp_path: Path) -> None:
    assert YUNIKORN_GANG not in ALL_SHAPES
    path = tmp_path / "s.yaml"
    head = "apiVersion: kube-fault-proxy/v1\nkind: Scenario\nmetadata: {name: s}\nspec:\n  load: {count: 4, shape: yunikorn-gang}\n"
    path.write_text(head + "  expect: {yunikorn: {verdict: clean}}\n")
    assert scenario.load_scenario(path).spec.load.shape == YUNIKORN_GANG
    path.write_text(head + "  expect: {kube-scheduler: {verdict: clean}}\n")
    with pytest.raises(ProfileError, match="yunikorn-gang is YuniKorn's gang scheduling: expect yunikorn only"):
        scenario.load_scenario(path)
