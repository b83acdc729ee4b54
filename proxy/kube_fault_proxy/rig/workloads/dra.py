"""DRA: devices the rig publishes for its KWOK nodes, claims that ask for 1-4 of them, and the driver's one job.

A fake driver needs no kubelet plugin for the scheduler to allocate: the scheduler's dynamic-resources plugin
reads ResourceSlices, and these say which devices each node has. A DeviceClass selects the driver's devices;
one ResourceClaimTemplate per device count (1-4) asks for that many; a pod names one template, and
kube-controller-manager's `resourceclaim-controller` makes the pod's claim from it (and takes the reservation
back when the pod is gone). Pure manifests first; the functions at the end write them.

Binding conditions (`DRADeviceBindingConditions`, Beta and on in 1.37, GA in 1.38): a device that lists
`bindingConditions` keeps the pod in the scheduler's PreBind until each of those conditions is True in the
claim's `status.devices`, which "the driver" sets. With no real driver, the rig does it (`Driver`).
"""

from __future__ import annotations

import contextlib
import datetime
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from lightkube import Client
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.types import PatchType

from kube_fault_proxy.kube.kubeapi import ApiError, HTTPError, Kube, Node, ensure_namespace
from kube_fault_proxy.rig.workloads.shapes import MAX_DEVICES, claim_template

DRIVER = "dra.kube-fault-proxy.dev"
DEVICE_CLASS = "kfp-device"
READY = "Ready"  # the binding condition the rig's driver sets True
FAILED = "Failed"  # its binding failure condition (never set by the rig)
SLICE_PREFIX = "kfp-"
CONTROLLERS = ("resourceclaim-controller",)  # what kube-controller-manager must run for templates to become claims

DeviceClass = create_global_resource("resource.k8s.io", "v1", "DeviceClass", "deviceclasses")
ResourceSlice = create_global_resource("resource.k8s.io", "v1", "ResourceSlice", "resourceslices")
ResourceClaim = create_namespaced_resource("resource.k8s.io", "v1", "ResourceClaim", "resourceclaims")
ResourceClaimTemplate = create_namespaced_resource("resource.k8s.io", "v1", "ResourceClaimTemplate",
                                                   "resourceclaimtemplates")
Obj = dict[str, Any]


def device_class() -> Obj:
    """The DeviceClass that selects the fake driver's devices."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DEVICE_CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}


def slice_name(node: str) -> str:
    """The ResourceSlice the rig publishes for a node."""
    return f"{SLICE_PREFIX}{node}"[:253]


def resource_slice(node: str, devices: int, binding_conditions: bool = False, generation: int = 1) -> Obj:
    """One node's pool: `devices` devices named dev-0.. on that node; with binding conditions each waits for
    READY (and fails on FAILED) and binds to the node it was allocated on."""
    def device(i: int) -> Obj:
        d: Obj = {"name": f"dev-{i}", "attributes": {"index": {"int": i}}}
        if binding_conditions:
            d |= {"bindsToNode": True, "bindingConditions": [READY], "bindingFailureConditions": [FAILED]}
        return d
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": slice_name(node)},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
                     "devices": [device(i) for i in range(devices)]}}


def template(count: int, namespace: str) -> Obj:
    """A template whose claims ask for exactly `count` devices of the class."""
    if not 1 <= count <= MAX_DEVICES:
        raise ValueError(f"a pod asks for 1 to {MAX_DEVICES} devices, not {count}")
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": claim_template(count), "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "dev", "exactly": {"deviceClassName": DEVICE_CLASS, "allocationMode": "ExactCount",
                                            "count": count}}]}}}}


def device_status(claim: Obj, now: str) -> list[Obj] | None:
    """What the driver writes into an allocated claim's `status.devices`: each allocated device that has
    binding conditions, with every one of them True (entries it has kept); None when nothing is left to set."""
    status = claim.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    have = {(d.get("driver"), d.get("pool"), d.get("device")): d for d in status.get("devices") or []}
    out, changed = [], False
    for r in results:
        key = (r.get("driver"), r.get("pool"), r.get("device"))
        entry = dict(have.get(key) or {"driver": key[0], "pool": key[1], "device": key[2]})
        conditions = {c["type"]: c for c in entry.get("conditions") or []}
        for wanted in r.get("bindingConditions") or []:
            if (conditions.get(wanted) or {}).get("status") != "True":
                conditions[wanted] = {"type": wanted, "status": "True", "reason": "DeviceReady",
                                      "message": "set by kube-fault-proxy's fake driver", "lastTransitionTime": now}
                changed = True
        if conditions:
            entry["conditions"] = list(conditions.values())
        if r.get("driver") == DRIVER or key in have:
            out.append(entry)
    return out if changed else None


def publish(client: Client, nodes: Sequence[str], devices: Sequence[int], namespaces: Sequence[str] = (),
            binding_conditions: bool = False) -> None:
    """The DeviceClass, a ResourceSlice per node (`devices[i]` devices on `nodes[i]`; a node already published
    gets its slice replaced under the next pool generation) and, in each namespace, the claim templates."""
    _apply(client, DeviceClass, device_class())
    for node, count in zip(nodes, devices, strict=True):
        generation = 1
        with contextlib.suppress(ApiError):
            old = client.get(ResourceSlice, slice_name(node))
            generation = int(old["spec"]["pool"]["generation"]) + 1
        _apply(client, ResourceSlice, resource_slice(node, count, binding_conditions, generation))
    for namespace in namespaces:
        ensure_namespace(client, namespace)
        for count in range(1, MAX_DEVICES + 1):
            _apply(client, ResourceClaimTemplate, template(count, namespace))


def unpublish(client: Client) -> int:
    """Every ResourceSlice of the fake driver deleted; how many."""
    slices = [s for s in client.list(ResourceSlice) if s["spec"].get("driver") == DRIVER]
    for s in slices:
        with contextlib.suppress(ApiError):
            client.delete(ResourceSlice, s["metadata"]["name"])
    return len(slices)


def claims_and_slices(client: Client) -> tuple[list[Obj], list[Obj]] | None:
    """Every ResourceClaim and ResourceSlice; None when the apiserver does not serve resource.k8s.io/v1."""
    try:
        return list(client.list(ResourceClaim, namespace="*")), list(client.list(ResourceSlice))
    except ApiError as e:
        if e.status.code == 404:
            return None
        raise


def node_names(client: Client) -> list[str]:
    """The cluster's nodes by name."""
    return sorted(n["metadata"]["name"] for n in client.list(Node))


def _apply(client: Client, kind: Any, doc: Obj) -> None:
    """Server-side apply of a whole object (its namespace in its metadata), owned by the rig."""
    client.apply(kind.from_dict(doc), field_manager="kube-fault-proxy", force=True)


def mark_ready(client: Client, namespace: str) -> int:
    """One pass of the driver: every allocated claim in the namespace whose devices wait for binding
    conditions gets them set True; how many claims it wrote."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    written = 0
    for claim in client.list(ResourceClaim, namespace=namespace):
        devices = device_status(claim, now)
        if devices is None:
            continue
        with contextlib.suppress(ApiError):  # deleted or changed meanwhile: the next pass sees it again
            client.patch(ResourceClaim.Status, claim["metadata"]["name"], {"status": {"devices": devices}},
                         namespace=namespace, patch_type=PatchType.MERGE)
            written += 1
    return written


class Driver:
    """The fake driver, as a thread: every `interval` seconds, `mark_ready` on each namespace. A context manager;
    `written` counts the claims it made ready."""

    def __init__(self, kube: Kube, namespaces: Sequence[str], interval: float = 0.5) -> None:
        self.kube, self.namespaces, self.interval = kube, tuple(namespaces), interval
        self.written = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kfp-dra-driver", daemon=True)

    def _run(self) -> None:
        with self.kube.client() as client:
            while not self._stop.is_set():
                for namespace in self.namespaces:
                    try:
                        self.written += mark_ready(client, namespace)
                    except (ApiError, HTTPError):  # an apiserver under faults: the next pass tries again
                        self.errors += 1
                self._stop.wait(self.interval)

    def __enter__(self) -> Driver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@contextlib.contextmanager
def published(kube: Kube, devices: Sequence[int], namespaces: Sequence[str],
              binding_conditions: bool = False) -> Iterator[list[str]]:
    """For the block: the first nodes (by name) publish `devices[i]` devices each, the templates in the
    namespaces, and with binding conditions the rig's driver running; the slices deleted afterwards.
    Yields the nodes published."""
    with kube.client() as client:
        nodes = node_names(client)[:len(devices)]
        publish(client, nodes, devices[:len(nodes)], namespaces, binding_conditions)
    try:
        if binding_conditions:
            with Driver(kube, namespaces):
                yield nodes
        else:
            yield nodes
    finally:
        with kube.client() as client:
            unpublish(client)
