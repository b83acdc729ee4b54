"""DRA's promises on constructed histories and snapshots: a device in two claims' allocations and a bound pod
whose claim is not reserved for it are each caught; a legal history (and the exceptions the allocator makes:
consumable capacity, admin access) is clean."""

from __future__ import annotations

from typing import Any

from kube_fault_proxy.rig.invariants.devices import ONCE, RESERVED, check_devices, judge_devices
from kube_fault_proxy.rig.invariants.history import Change, History
from kube_fault_proxy.rig.workloads import dra

Obj = dict[str, Any]


class Story:
    """A history written one change at a time, each with the next resourceVersion."""

    def __init__(self) -> None:
        self.changes: list[Change] = []

    def put(self, kind: str, obj: Obj, event: str = "MODIFIED") -> Obj:
        rv = len(self.changes) + 1
        obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(rv)}}
        self.changes.append(Change(float(rv), kind, event, obj))
        return obj

    def history(self) -> History:
        return History(self.changes, 0.0, float(len(self.changes) + 1))


def claim(name: str, *devices: str, reserved: tuple[str, ...] = (), admin: bool = False) -> Obj:
    status: Obj = {}
    if devices:
        status["allocation"] = {"devices": {"results": [
            {"request": "dev", "driver": dra.DRIVER, "pool": "kfp-node-0001", "device": d,
             **({"adminAccess": True} if admin else {})} for d in devices]}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": uid, "uid": uid} for uid in reserved]
    return {"metadata": {"name": name, "namespace": "w", "uid": f"c-{name}"}, "status": status}


def pod(name: str, node: str = "", claim_name: str | None = None, deleting: bool = False) -> Obj:
    meta: Obj = {"name": name, "namespace": "w", "uid": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-06T06:00:00Z"
    status: Obj = {"phase": "Running" if node else "Pending"}
    if claim_name:
        status["resourceClaimStatuses"] = [{"name": "devices", "resourceClaimName": claim_name}]
    return {"metadata": meta, "status": status,
            "spec": {"nodeName": node, "resourceClaims": [{"name": "devices",
                                                           "resourceClaimTemplateName": "kfp-devices-1"}]}}


def legal() -> Story:
    """Two pods, each with its own device; the scheduler's PreBind writes allocation and reservation, then binds."""
    s = Story()
    s.put("ResourceSlice", dra.resource_slice("kfp-node-0001", 4), "ADDED")
    for i, device in ((1, "dev-0"), (2, "dev-1")):
        s.put("Pod", pod(f"p{i}"), "ADDED")
        s.put("ResourceClaim", claim(f"p{i}-devices"), "ADDED")
        s.put("Pod", pod(f"p{i}", claim_name=f"p{i}-devices"))
        s.put("ResourceClaim", claim(f"p{i}-devices", device, reserved=(f"p{i}",)))
        s.put("Pod", pod(f"p{i}", "kfp-node-0001", f"p{i}-devices"))
    return s


def test_a_legal_history_is_clean() -> None:
    assert judge_devices(legal().history()) == []


def test_a_device_allocated_to_two_claims_is_caught_once() -> None:
    s = legal()
    s.put("Pod", pod("p3", claim_name="p3-devices"), "ADDED")
    s.put("ResourceClaim", claim("p3-devices", "dev-1", reserved=("p3",)), "ADDED")
    s.put("Pod", pod("p3", "kfp-node-0001", "p3-devices"))
    s.put("ResourceClaim", claim("p3-devices", "dev-1", reserved=("p3",)))  # a second moment of the same breach
    [v] = judge_devices(s.history())
    assert v.invariant == ONCE and v.objects == ("w/p2-devices", "w/p3-devices")
    assert v.kind == f"{dra.DRIVER}/kfp-node-0001/dev-1" and v.numbers == {"claims": 2, "moments": 2}


def test_a_device_freed_before_it_is_allocated_again_is_clean() -> None:
    s = legal()
    s.put("ResourceClaim", claim("p2-devices"), "DELETED")
    s.put("ResourceClaim", claim("p3-devices", "dev-1", reserved=("p3",)), "ADDED")
    assert judge_devices(s.history()) == []


def test_consumable_capacity_and_admin_access_may_share_a_device() -> None:
    shared = dra.resource_slice("kfp-node-0001", 2)
    shared["spec"]["devices"][1]["allowMultipleAllocations"] = True
    claims = [claim("a", "dev-1"), claim("b", "dev-1"), claim("c", "dev-0"), claim("d", "dev-0", admin=True)]
    assert check_devices([], claims, [shared]) == []
    [v] = check_devices([], claims, [dra.resource_slice("kfp-node-0001", 2)])  # dev-1 not shared there
    assert v.invariant == ONCE and v.objects == ("w/a", "w/b")


def test_a_bound_pod_whose_claim_is_not_reserved_for_it_is_caught() -> None:
    s = Story()
    s.put("Pod", pod("p1", claim_name="p1-devices"), "ADDED")
    s.put("ResourceClaim", claim("p1-devices", "dev-0", reserved=("someone-else",)), "ADDED")
    s.put("Pod", pod("p1", "kfp-node-0001", "p1-devices"))
    [v] = judge_devices(s.history())
    assert (v.invariant, v.kind, v.node) == (RESERVED, "unreserved", "kfp-node-0001")
    assert v.message == "w/p1 is bound to kfp-node-0001 but its claim w/p1-devices is not reserved for it"


def test_each_way_a_bound_pods_claim_can_be_wrong() -> None:
    claims = [claim("unallocated", reserved=("p",))]
    pods = [pod("p", "n1", "unallocated"), pod("q", "n1", "gone"), pod("r", "n1")]
    kinds = sorted(v.kind for v in check_devices(pods, claims, []))
    assert kinds == ["missing", "unallocated", "unknown"]


def test_a_pod_being_deleted_or_done_is_not_judged() -> None:
    done = pod("p", "n1", "p-devices")
    done["status"]["phase"] = "Succeeded"
    pods = [pod("q", "n1", "q-devices", deleting=True), done]
    assert check_devices(pods, [claim("p-devices", "dev-0"), claim("q-devices", "dev-1")], []) == []


def test_a_podgroups_claim_reserved_for_the_group_is_clean() -> None:
    member = pod("p", "n1", "g-devices")
    member["spec"]["schedulingGroup"] = {"podGroupName": "g"}
    shared = claim("g-devices", "dev-0")
    shared["status"]["reservedFor"] = [{"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "g",
                                        "uid": "g-uid"}]
    assert check_devices([member], [shared], []) == []
    member["spec"]["schedulingGroup"] = {"podGroupName": "other"}
    assert [v.kind for v in check_devices([member], [shared], [])] == ["unreserved"]


def test_a_snapshot_judges_one_namespace() -> None:
    other = claim("x", "dev-0")
    other["metadata"]["namespace"] = "elsewhere"
    assert check_devices([], [claim("a", "dev-0"), other], [], namespace="nobody") == []
    assert len(check_devices([], [claim("a", "dev-0"), other], [], namespace="w")) == 1
