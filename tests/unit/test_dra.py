"""The DRA workload: the dra shape's devices cover its planned placement, its pods claim 1-4 devices through
the templates the rig publishes, slices and templates are valid manifests, and the fake driver sets exactly the
binding conditions an allocation waits for."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from kube_fault_proxy.rig.cluster import controller_manager
from kube_fault_proxy.rig.search import trial
from kube_fault_proxy.rig.workloads import dra, load
from kube_fault_proxy.rig.workloads.shapes import (
    ALL_SHAPES,
    BINDING_SHAPES,
    DEVICE_SHAPES,
    MAX_DEVICES,
    SHAPES,
    generate,
)

from tests.support.rig_options import captured_options


@pytest.mark.parametrize(("nodes", "pods"), [(1, 1), (3, 20), (5, 60), (20, 7)])
def test_every_node_has_the_devices_its_planned_pods_need_and_one_largest_claim_more(nodes: int, pods: int) -> None:
    w = generate("dra", nodes, pods, seed=4)
    assert {p.devices for p in w.pods} <= set(range(1, MAX_DEVICES + 1))
    need = Counter()
    for p, on in zip(w.pods, w.placement, strict=True):
        need[on] += p.devices
    assert [n.devices for n in w.nodes] == [need[i] + MAX_DEVICES for i in range(nodes)]


def test_the_search_draws_dra_only_when_asked() -> None:
    assert "dra" in ALL_SHAPES and "dra" not in SHAPES and DEVICE_SHAPES == ("dra", "dra-binding")
    assert len({p.devices for p in generate("dra", 3, 60, seed=1).pods}) == MAX_DEVICES  # all four counts drawn


def test_dra_binding_is_dra_with_devices_that_wait_for_their_binding_conditions() -> None:
    """The same nodes, pods and placement as dra for a seed; only its devices differ (published with binding
    conditions, which the rig's fake driver sets during the trial)."""
    plain, waiting = generate("dra", 4, 30, seed=7), generate("dra-binding", 4, 30, seed=7)
    assert (waiting.nodes, waiting.pods, waiting.placement) == (plain.nodes, plain.pods, plain.placement)
    assert waiting.shape == "dra-binding" and BINDING_SHAPES == ("dra-binding",) and "dra-binding" not in SHAPES
    assert dra.resource_slice("n1", 2, binding_conditions=True)["spec"]["devices"][0]["bindingConditions"]
    assert "bindingConditions" not in dra.resource_slice("n1", 2)["spec"]["devices"][0]


def test_a_dra_pod_claims_its_devices_through_a_template() -> None:
    w = generate("dra", 2, 4, seed=2)
    pod = load.pod_manifest(load.LoadSpec(count=4, namespace="n", pods=w.pods), "p", 1)
    assert pod["spec"]["resourceClaims"] == [{"name": "devices",
                                              "resourceClaimTemplateName": f"kfp-devices-{w.pods[1].devices}"}]
    assert pod["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "100m", "memory": "64Mi"},
                                                         "claims": [{"name": "devices"}]}
    plain = load.pod_manifest(load.LoadSpec(count=1, pods=generate("mixed", 1, 1, 0).pods), "q")
    assert "claims" not in plain["spec"]["containers"][0]["resources"] and "resourceClaims" not in plain["spec"]


def test_templates_ask_for_exactly_their_count_of_the_class() -> None:
    t = dra.template(3, "n")
    assert t["metadata"] == {"name": "kfp-devices-3", "namespace": "n"}
    assert t["spec"]["spec"]["devices"]["requests"] == [
        {"name": "dev", "exactly": {"deviceClassName": dra.DEVICE_CLASS, "allocationMode": "ExactCount", "count": 3}}]
    for bad in (0, MAX_DEVICES + 1):
        with pytest.raises(ValueError, match="a pod asks for 1 to 4 devices"):
            dra.template(bad, "n")
    assert dra.DRIVER in dra.device_class()["spec"]["selectors"][0]["cel"]["expression"]


def test_a_slice_is_one_pool_on_one_node_with_binding_conditions_when_asked() -> None:
    s = dra.resource_slice("kfp-node-0002", 3, generation=2)
    assert s["metadata"]["name"] == "kfp-kfp-node-0002"
    assert s["spec"]["nodeName"] == "kfp-node-0002" and s["spec"]["driver"] == dra.DRIVER
    assert s["spec"]["pool"] == {"name": "kfp-node-0002", "generation": 2, "resourceSliceCount": 1}
    assert [d["name"] for d in s["spec"]["devices"]] == ["dev-0", "dev-1", "dev-2"]
    assert all("bindingConditions" not in d for d in s["spec"]["devices"])
    waiting = dra.resource_slice("n", 1, binding_conditions=True)["spec"]["devices"][0]
    assert (waiting["bindingConditions"], waiting["bindingFailureConditions"], waiting["bindsToNode"]) == \
        ([dra.READY], [dra.FAILED], True)


def allocated(*conditions: list[str], devices: list[dict[str, object]] | None = None) -> dict[str, object]:
    results = [{"request": "dev", "driver": dra.DRIVER, "pool": "n", "device": f"dev-{i}",
                **({"bindingConditions": c} if c else {})} for i, c in enumerate(conditions)]
    return {"metadata": {"name": "c"}, "status": {"allocation": {"devices": {"results": results}},
                                                  **({"devices": devices} if devices is not None else {})}}


def test_the_driver_sets_each_binding_condition_true_once() -> None:
    [entry, plain] = dra.device_status(allocated([dra.READY], []), "T") or []
    assert entry == {"driver": dra.DRIVER, "pool": "n", "device": "dev-0", "conditions": [
        {"type": dra.READY, "status": "True", "reason": "DeviceReady",
         "message": "set by kube-fault-proxy's fake driver", "lastTransitionTime": "T"}]}
    assert plain == {"driver": dra.DRIVER, "pool": "n", "device": "dev-1"}
    assert dra.device_status(allocated([dra.READY], devices=[entry]), "T2") is None  # nothing left to set
    assert dra.device_status(allocated([], []), "T") is None  # no binding conditions: nothing to do
    assert dra.device_status({"metadata": {"name": "c"}, "status": {}}, "T") is None  # not allocated yet


@pytest.mark.parametrize(("scheduler", "devices", "extra"), [
    ("kube-scheduler", True, {"resourceclaim-controller"}),
    ("kube-scheduler", False, set()),
    ("kube-controller-manager", True, {"resourceclaim-controller", "replicaset-controller"}),
])
def test_a_search_rig_that_may_draw_dra_runs_the_resourceclaim_controller(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, scheduler: str, devices: bool, extra: set[str]) -> None:
    seen = captured_options(monkeypatch)
    with trial.Rig.running(tmp_path, scheduler, 3, tmp_path, devices=devices):
        pass
    [opts] = seen
    assert set(opts.controllers) - set(controller_manager.CONTROLLERS) >= extra
    assert ("resourceclaim-controller" in opts.controllers) == devices
