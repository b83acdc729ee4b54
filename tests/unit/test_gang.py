"""The gang workload's manifests: a Workload with a gang template, its PodGroup, and members that name it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kube_fault_proxy.rig.search import trial
from kube_fault_proxy.rig.workloads import gang, shapes
from lightkube import ApiError
from lightkube.models.meta_v1 import Status

from tests.support.rig_options import captured_options


def test_a_gang_is_a_workload_a_podgroup_from_its_template_and_members_naming_the_group() -> None:
    w = gang.workload("g", "n", 3)
    assert w["apiVersion"] == "scheduling.k8s.io/v1beta1"
    assert w["spec"]["podGroupTemplates"] == [{"name": "members", "schedulingPolicy": {"gang": {"minCount": 3}}}]
    pg = gang.pod_group("g", "n", 3, "g")
    assert pg["spec"] == {"schedulingPolicy": {"gang": {"minCount": 3}},
                          "workloadRef": {"workloadName": "g", "templateName": "members"}}
    assert "workloadRef" not in gang.pod_group("g", "n", 3)["spec"]
    pod = gang.member("g", 2, "n", "4")
    assert pod["metadata"]["name"] == "g-2" and pod["metadata"]["labels"] == {shapes.GANG_LABEL: "g"}
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


@pytest.mark.parametrize(("gates", "scheduler_gate"), [
    (None, True),
    ({"kube-scheduler": {"GenericWorkload": False}}, False),  # a control by gates keeps its own setting
])
def test_a_search_rig_that_may_draw_gangs_turns_on_generic_workload_its_api_and_podgroup_protection(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gates: dict[str, dict[str, bool]] | None,
        scheduler_gate: bool) -> None:
    seen = captured_options(monkeypatch)
    with trial.Rig.running(tmp_path, "kube-scheduler", 3, tmp_path, feature_gates=gates, gangs=True):
        pass
    with trial.Rig.running(tmp_path, "kube-scheduler", 3, tmp_path, feature_gates=gates):
        pass
    on, off = seen
    assert on.runtime_config == (gang.RUNTIME_CONFIG,) and "podgroup-protection-controller" in on.controllers
    assert on.feature_gates["kube-apiserver"] == {"GenericWorkload": True}
    assert on.feature_gates["kube-controller-manager"] == {"GenericWorkload": True}
    assert on.feature_gates["kube-scheduler"] == {"GenericWorkload": scheduler_gate}
    assert off.runtime_config == () and "podgroup-protection-controller" not in off.controllers
    assert "kube-apiserver" not in off.feature_gates


class Refusing:
    """A client whose apiserver does not serve scheduling.k8s.io/v1beta1 (404), or refuses otherwise."""

    def __init__(self, code: int) -> None:
        self.code = code

    def create(self, obj: object) -> None:
        raise ApiError(status=Status(code=self.code, message="no"))


@pytest.mark.parametrize("code", [404, 403])
def test_an_apiserver_without_the_gang_api_is_said_plainly(code: int) -> None:
    if code == 404:
        with pytest.raises(RuntimeError, match=re.escape("does not serve scheduling.k8s.io/v1beta1 PodGroups: start "
                                                         "it with --runtime-config scheduling.k8s.io/v1beta1=true")):
            gang.create_groups(Refusing(code), "w", (("g0", 2),))  # type: ignore[arg-type]
    else:
        with pytest.raises(ApiError):  # any other refusal is the apiserver's own
            gang.create_groups(Refusing(code), "w", (("g0", 2),))  # type: ignore[arg-type]
