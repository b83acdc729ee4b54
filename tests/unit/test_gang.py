"""The gang workload's manifests: a Workload with a gang template, its PodGroup, and members that name it."""

from __future__ import annotations

import pytest
from kube_fault_proxy.rig.workloads import gang


def test_a_gang_is_a_workload_a_podgroup_from_its_template_and_members_naming_the_group() -> None:
    w = gang.workload("g", "n", 3)
    assert w["apiVersion"] == "scheduling.k8s.io/v1beta1"
    assert w["spec"]["podGroupTemplates"] == [{"name": "members", "schedulingPolicy": {"gang": {"minCount": 3}}}]
    pg = gang.pod_group("g", "n", 3, "g")
    assert pg["spec"] == {"schedulingPolicy": {"gang": {"minCount": 3}},
                          "workloadRef": {"workloadName": "g", "templateName": "members"}}
    assert "workloadRef" not in gang.pod_group("g", "n", 3)["spec"]
    pod = gang.member("g", 2, "n", "4")
    assert pod["metadata"]["name"] == "g-2" and pod["metadata"]["labels"] == {gang.GANG_LABEL: "g"}
    assert pod["spec"]["schedulingGroup"] == {"podGroupName": "g"}
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "4"


def test_the_gate_and_the_api_it_needs() -> None:
    assert gang.RUNTIME_CONFIG == "scheduling.k8s.io/v1beta1=true"
    assert gang.GATES == ("kube-apiserver:GenericWorkload=true", "kube-scheduler:GenericWorkload=true",
                          "kube-controller-manager:GenericWorkload=true")
    assert gang.CONTROLLERS == ("podgroup-protection-controller",)


@pytest.mark.parametrize(("min_count", "members"), [(0, 3), (4, 3)])
def test_a_gang_that_can_never_be_whole_is_refused(min_count: int, members: int) -> None:
    with pytest.raises(ValueError, match=f"a gang of {members} members cannot have minCount {min_count}"):
        gang.create_gang(None, "n", "g", min_count, members, "1")  # type: ignore[arg-type]  # refused before any call
