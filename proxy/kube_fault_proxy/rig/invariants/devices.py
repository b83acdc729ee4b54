"""What DRA promises, judged on a snapshot or at every moment of a recorded history.

`device-allocated-once`: a device is in at most one claim's allocation, unless its slice allows it multiple
allocations (consumable capacity) or the result has admin access (the allocator marks neither as in use).
`bound-pod-claims-reserved`: a bound pod's claims are allocated and reserved for it. The scheduler writes both in
PreBind before the Binding, so in etcd's order a pod's bind comes after its claims' status; the resourceclaim
controller takes a reservation back only once the pod is done or being deleted, so such pods are not judged.
"""

from __future__ import annotations

from collections.abc import Iterable

from kube_fault_proxy.rig.invariants.catalogue import Violation
from kube_fault_proxy.rig.invariants.history import History
from kube_fault_proxy.rig.invariants.placement import Obj, ref, terminated

ONCE = "device-allocated-once"
RESERVED = "bound-pod-claims-reserved"
NAMES = (ONCE, RESERVED)
Device = tuple[str, str, str]  # driver, pool, device


def _results(claim: Obj) -> list[Obj]:
    return (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []


def shared_devices(slices: Iterable[Obj]) -> set[Device]:
    """Devices whose slice allows them more than one allocation (allowMultipleAllocations)."""
    return {(s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"])
            for s in slices for d in s["spec"].get("devices") or [] if d.get("allowMultipleAllocations")}


def allocated_twice(claims: Iterable[Obj], shared: set[Device], only: Obj | None = None) -> list[Violation]:
    """Each device held by two or more claims' allocations (with `only`: just the devices that claim holds)."""
    holders: dict[Device, list[str]] = {}
    for claim in claims:
        for r in _results(claim):
            device = (r.get("driver", ""), r.get("pool", ""), r.get("device", ""))
            if r.get("adminAccess") or device in shared:
                continue
            holders.setdefault(device, [])
            if ref(claim) not in holders[device]:
                holders[device].append(ref(claim))
    wanted = None if only is None else {(r.get("driver"), r.get("pool"), r.get("device")) for r in _results(only)}
    return [Violation(ONCE, f"device {'/'.join(d)} is allocated to {len(h)} claims: {', '.join(h)}", tuple(h),
                      "/".join(d), numbers={"claims": len(h)})
            for d, h in sorted(holders.items()) if len(h) > 1 and (wanted is None or d in wanted)]


def claim_names(pod: Obj) -> list[tuple[str, str | None]]:
    """(the pod's name for each claim, the ResourceClaim it means, None if not known yet)."""
    generated = {s["name"]: s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses")
                 or []}
    return [(c["name"], c.get("resourceClaimName") or generated.get(c["name"]))
            for c in pod["spec"].get("resourceClaims") or []]


def _reserved_for(claim: Obj, pod: Obj) -> bool:
    group = (pod["spec"].get("schedulingGroup") or {}).get("podGroupName")
    for consumer in (claim.get("status") or {}).get("reservedFor") or []:
        if consumer.get("resource") == "pods" and consumer.get("uid") == pod["metadata"].get("uid"):
            return True
        if group and consumer.get("resource") == "podgroups" and consumer.get("name") == group:
            return True
    return False


def judged_pod(pod: Obj) -> bool:
    """A pod the reservation promise covers now: bound, with claims, neither done nor being deleted."""
    return bool(pod["spec"].get("nodeName") and pod["spec"].get("resourceClaims")) and not terminated(pod) \
        and not pod["metadata"].get("deletionTimestamp")


def unreserved(pod: Obj, claims: dict[tuple[str, str], Obj]) -> list[Violation]:
    """What is wrong with a bound pod's claims: unknown, missing, unallocated or not reserved for it."""
    out = []
    namespace = pod["metadata"].get("namespace", "")
    for name, claim_name in claim_names(pod):
        claim = claims.get((namespace, claim_name)) if claim_name else None
        if claim_name is None:
            why, kind = f"its claim {name} has no ResourceClaim named in its status", "unknown"
        elif claim is None:
            why, kind = f"its claim {namespace}/{claim_name} does not exist", "missing"
        elif not (claim.get("status") or {}).get("allocation"):
            why, kind = f"its claim {namespace}/{claim_name} is not allocated", "unallocated"
        elif not _reserved_for(claim, pod):
            why, kind = f"its claim {namespace}/{claim_name} is not reserved for it", "unreserved"
        else:
            continue
        out.append(Violation(RESERVED, f"{ref(pod)} is bound to {pod['spec']['nodeName']} but {why}",
                             (ref(pod), f"{namespace}/{claim_name or name}"), kind, pod["spec"]["nodeName"]))
    return out


def check_devices(pods: Iterable[Obj], claims: Iterable[Obj], slices: Iterable[Obj],
                  namespace: str | None = None) -> list[Violation]:
    """Both promises on a snapshot (pods and claims of one namespace, if given; devices of every claim)."""
    claims = list(claims)
    by_name = {(c["metadata"].get("namespace", ""), c["metadata"]["name"]): c for c in claims}
    mine = {ref(c) for c in claims if namespace is None or c["metadata"].get("namespace") == namespace}
    out = [v for v in allocated_twice(claims, shared_devices(slices)) if mine.intersection(v.objects)]
    for pod in pods:
        if judged_pod(pod) and (namespace is None or pod["metadata"].get("namespace") == namespace):
            out += unreserved(pod, by_name)
    return out


def judge_devices(history: History) -> list[Violation]:
    """Both promises at every moment of a history of Pods, ResourceClaims and ResourceSlices: a claim's devices
    when its allocation changes, a pod's claims when it is bound (or changes while bound). Each breach once, at
    its first moment, with how many moments broke it."""
    claims: dict[tuple[str, str], Obj] = {}
    slices: dict[str, Obj] = {}
    first: dict[tuple[str, tuple[str, ...], str], Violation] = {}
    moments: dict[tuple[str, tuple[str, ...], str], int] = {}
    for change in history.ordered():
        obj, meta = change.obj, change.obj["metadata"]
        found: list[Violation] = []
        if change.kind == "ResourceSlice":
            if change.type == "DELETED":
                slices.pop(meta["name"], None)
            else:
                slices[meta["name"]] = obj
        elif change.kind == "ResourceClaim":
            key = (meta.get("namespace", ""), meta["name"])
            if change.type == "DELETED":
                claims.pop(key, None)
            else:
                claims[key] = obj
                found += allocated_twice(claims.values(), shared_devices(slices.values()), obj)
        elif change.kind == "Pod" and change.type != "DELETED" and judged_pod(obj):
            found += unreserved(obj, claims)
        for v in found:
            seen = (v.invariant, v.objects, v.kind)
            first.setdefault(seen, v)
            moments[seen] = moments.get(seen, 0) + 1
    return [Violation(v.invariant, v.message, v.objects, v.kind, v.node, {**v.numbers, "moments": moments[k]})
            for k, v in first.items()]
