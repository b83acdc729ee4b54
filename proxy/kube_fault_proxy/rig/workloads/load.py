"""`load pods`: create pods at a rate, bounded in count and time, with progress and a summary."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightkube import Client
from lightkube.types import PatchType

from kube_fault_proxy.kube.kubeapi import (
    SYSTEM_NAMESPACES,
    ApiError,
    HTTPError,
    Kube,
    Node,
    Pod,
    WaitTimeout,
    delete_namespace,
    delete_pods,
    ensure_namespace,
)
from kube_fault_proxy.rig.console import Progress
from kube_fault_proxy.rig.workloads import dra, gang, pod_posts, shapes

LOAD_LABEL = "kube-fault-proxy/load"
TOUCHED = "kube-fault-proxy/touched"


def touch_pod(api: Client, name: str, namespace: str) -> None:
    """An informer update for one pod, and nothing else: a fresh annotation, as any label change
    or relist would cause (the path on which YuniKorn's shim re-stamps a stale node)."""
    api.patch(Pod, name, {"metadata": {"annotations": {TOUCHED: str(time.time())}}}, namespace=namespace,
              patch_type=PatchType.MERGE)


def act_on_pods(api: Client, action: str, namespace: str) -> str:
    """A search trial's workload action on a namespace's pods: an informer update for every pod (`touchPods`), or
    every fifth pod by name deleted at once (`deletePods`); what it did."""
    pods = sorted(api.list(Pod, namespace=namespace), key=lambda p: p["metadata"]["name"])
    done = 0
    if action == "touchPods":
        for p in pods:
            with contextlib.suppress(ApiError):
                touch_pod(api, p["metadata"]["name"], namespace)
                done += 1
        return f"touched {done} pods"
    if action != "deletePods":
        raise ValueError(f"unknown workload action {action!r}")
    for p in pods[::5]:
        with contextlib.suppress(ApiError):
            api.delete(Pod, p["metadata"]["name"], namespace=namespace, grace_period=0)
            done += 1
    return f"deleted {done} pods"


@dataclass(frozen=True)
class LoadSpec:
    """What to create."""

    count: int = 100
    rate: float = 100.0
    concurrency: int = 8
    namespace: str = "default"
    scheduler_name: str = "default-scheduler"
    cpu: str = "100m"
    memory: str = "64Mi"
    labels: dict[str, str] = field(default_factory=dict)
    app_id: str | None = None
    timeout: float = 600.0
    http2: bool = False  # one connection for every creation (HTTP/1.1: one per creation in flight)
    scheduling_gates: tuple[str, ...] = ()  # spec.schedulingGates: no scheduler takes the pod until they are lifted
    # A creation that got no answer (the apiserver killed, restarting) is sent again until the timeout;
    # a 409 for it then means the first one was committed: it counts as created.
    retry_unreachable: bool = False
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    # A workload shape's pods (rig.shapes), one per pod of the load in order: their requests, labels and
    # placement constraints in place of cpu and memory. Empty: every pod is the same.
    pods: tuple[shapes.PodSpec, ...] = ()

    def __post_init__(self) -> None:
        if self.pods and len(self.pods) != self.count:
            raise ValueError(f"a shaped load has one pod spec per pod: {len(self.pods)} specs for {self.count} pods")


@dataclass
class LoadResult:
    """What happened."""

    run_id: str
    requested: int
    created: int = 0
    failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    timed_out: bool = False
    names: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Achieved creations per second."""
        return self.created / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON form (without the pod names)."""
        return {"runId": self.run_id, "requested": self.requested, "created": self.created, "failed": self.failed,
                "errors": self.errors, "seconds": round(self.seconds, 3), "ratePerSecond": round(self.rate, 1),
                "timedOut": self.timed_out}


def pod_manifest(spec: LoadSpec, name: str, index: int = 0) -> dict[str, Any]:
    """Pod `index` of the load: a pause container with requests, labelled with the run id (a shaped
    load's pod with its shape's requests, labels and constraints)."""
    shaped = spec.pods[index] if spec.pods else None
    labels = {LOAD_LABEL: spec.run_id, **spec.labels, **(shaped.labels if shaped else {})}
    if spec.app_id:
        labels["applicationId"] = spec.app_id
    group = shaped.task_group if shaped else None
    if group is not None:  # a YuniKorn gang: its application, unique to this load
        labels["applicationId"] = f"{spec.run_id}-{group.app}"
    requests = ({"cpu": f"{shaped.cpu_m}m", "memory": f"{shaped.memory_mi}Mi"} if shaped
                else {"cpu": spec.cpu, "memory": spec.memory})
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": spec.namespace, "labels": labels,
                     **({"annotations": group.annotations()} if group is not None else {})},
        "spec": {"schedulerName": spec.scheduler_name, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"requests": requests}}]}}
    if shaped:
        pod["spec"].update(shaped.spec_fields())
        pod["spec"]["containers"][0]["resources"].update(shaped.container_resources())
    if spec.scheduling_gates:
        pod["spec"]["schedulingGates"] = [{"name": gate} for gate in spec.scheduling_gates]
    return pod


def shape_nodes(client: Client, specs: Sequence[shapes.NodeSpec]) -> list[str]:
    """Give the first nodes (by name) a shape's capacity, labels and taints (KWOK keeps the capacity it
    is given); the names of the nodes shaped. Only what the shape sets is changed (`shaped` puts it back)."""
    nodes = sorted(client.list(Node), key=lambda n: n["metadata"]["name"])
    for node, spec in zip(nodes, specs, strict=False):
        body, status = shapes.node_patches(spec, node)
        client.patch(Node, node["metadata"]["name"], body, patch_type=PatchType.MERGE)
        client.patch(Node.Status, node["metadata"]["name"], status, patch_type=PatchType.MERGE)
    return [n["metadata"]["name"] for n in nodes[:len(specs)]]


@contextlib.contextmanager
def shaped(kube: Kube, shape: str, pods: int, seed: int,
           namespace: str = "default") -> Iterator[shapes.Workload | None]:
    """For a tight shape, every node (by name) given the shape's capacity, labels and taints for the block,
    and the workload over them; the nodes put back as they were (their pool label, taints, capacity and
    allocatable, as read before) however the block ends. Roomy: nothing changes (None). A device shape (dra,
    dra-binding) also publishes each node's devices, and the claim templates in `namespace`, for the block (with
    binding conditions, the rig's fake driver runs for it too). The gang shape also creates its PodGroups in
    `namespace` (kept: they go with the namespace)."""
    if shape == "roomy":
        yield None
        return
    if shape in shapes.DEVICE_SHAPES:
        with kube.client() as client:
            count = len(list(client.list(Node)))
        workload = shapes.generate(shape, count, pods, seed)
        with dra.published(kube, [n.devices for n in workload.nodes], [namespace],
                           binding_conditions=shape in shapes.BINDING_SHAPES):
            yield workload
        return
    with kube.client() as client:
        before = [(n["metadata"]["name"], _shapeable(n)) for n in client.list(Node)]
        workload = shapes.generate(shape, len(before), pods, seed)
        shape_nodes(client, workload.nodes)
        if workload.gangs:  # the gang shape: its PodGroups before any member
            ensure_namespace(client, namespace)
            gang.create_groups(client, namespace, workload.gangs)
    try:
        yield workload
    finally:
        with kube.client() as client:
            for name, (labels, spec, status) in before:
                try:
                    client.patch(Node, name, {"metadata": {"labels": labels}, "spec": spec}, patch_type=PatchType.MERGE)
                    client.patch(Node.Status, name, {"status": status}, patch_type=PatchType.MERGE)
                except ApiError as e:
                    if e.status.code != 404:  # a node gone since is skipped
                        raise


def _shapeable(node: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """What a shape may change on a node, as merge patches that put it back: (labels, spec, status)."""
    status = node.get("status") or {}
    return ({shapes.POOL_LABEL: (node["metadata"].get("labels") or {}).get(shapes.POOL_LABEL)},
            {"taints": (node.get("spec") or {}).get("taints") or None},
            {"capacity": dict(status.get("capacity") or {}), "allocatable": dict(status.get("allocatable") or {})})


def _failure(e: HTTPError) -> str:
    """How a failed creation is counted: by status, or by the kind of transport error."""
    response = getattr(e, "response", None)
    return f"HTTP {response.status_code}" if response is not None else type(e).__name__


async def _create_one(conn: pod_posts.Connection | None, create_lightkube: Any, path: str, doc: dict[str, Any],
                      spec: LoadSpec, deadline: float) -> str:
    """One pod's creation; "" if created, else why not ("HTTP 422", the transport error's kind)."""
    retried = False
    while True:
        try:
            if conn is not None:
                code, _ = await conn.post(path, doc)
                why = "" if code == 201 else f"HTTP {code}"
            else:
                code, why = await create_lightkube(doc)
            return "" if code == 409 and retried else why  # a retry's 409: the unanswered first one was committed
        except pod_posts.Unreachable as e:
            if not spec.retry_unreachable or time.monotonic() >= deadline:
                return str(e).partition(":")[0]
            retried = True
            await asyncio.sleep(0.5)


class _Pace:
    """A shared schedule: request k goes out no earlier than start + k/rate."""

    def __init__(self, start: float, rate: float) -> None:
        self.interval = 1.0 / rate
        self.next_at = start

    async def wait(self) -> None:
        """Until this request's turn."""
        now = time.monotonic()
        at = max(self.next_at, now)
        self.next_at = at + self.interval
        await asyncio.sleep(at - now)


def _status(result: LoadResult, start: float) -> str:
    """The progress line: what was sent, created and failed, and the rate so far."""
    elapsed = time.monotonic() - start
    return (f"sent, {result.created} created, {result.failed} failed, "
            f"{result.created / elapsed if elapsed else 0:.0f}/s")


async def _run(kube: Kube, spec: LoadSpec, result: LoadResult, progress: bool) -> None:
    start = time.monotonic()
    deadline = start + spec.timeout
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(spec.count):
        queue.put_nowait(i)
    pace = _Pace(start, spec.rate)

    # Plain HTTP/1.1 POSTs (pod_posts: a keep-alive connection per creation in flight, ~0.25 ms of
    # CPU a pod against lightkube's ~1.2-1.9 ms); lightkube when the credentials are not a bearer
    # token or a client certificate (the manual's records: load clients).
    endpoint = pod_posts.Endpoint.of(kube)
    path = f"/api/v1/namespaces/{spec.namespace}/pods"
    async with kube.async_client(http2=spec.http2) as client:
        async def create_lightkube(doc: dict[str, Any]) -> tuple[int, str]:
            try:
                await client.create(Pod.from_dict(doc))  # the namespace is in the manifest
                return 201, ""
            except ApiError as e:
                return e.status.code or 0, _failure(e)
            except HTTPError as e:
                raise pod_posts.Unreachable(_failure(e)) from None

        async def worker() -> None:
            conn = pod_posts.Connection(endpoint) if endpoint else None
            try:
                while not queue.empty() and time.monotonic() < deadline:
                    i = queue.get_nowait()
                    await pace.wait()
                    name = f"load-{spec.run_id}-{i:05d}"
                    why = await _create_one(conn, create_lightkube, path, pod_manifest(spec, name, i), spec,
                                            deadline)
                    if not why:
                        result.created += 1
                        result.names.append(name)
                    else:
                        result.failed += 1
                        result.errors[why] = result.errors.get(why, 0) + 1
            finally:
                if conn is not None:
                    await conn.close()

        async def report(bar: Progress) -> None:
            while True:
                bar.update(result.created + result.failed, status=_status(result, start))
                await asyncio.sleep(0.25)

        with Progress("pods", spec.count, enabled=progress) as bar:
            reporter = asyncio.create_task(report(bar))
            try:
                await asyncio.gather(*(worker() for _ in range(max(1, spec.concurrency))))
            finally:
                reporter.cancel()
            bar.update(result.created + result.failed, status=_status(result, start))
    result.seconds = time.monotonic() - start
    result.timed_out = result.created + result.failed < spec.count


def create_pods(kube: Kube, spec: LoadSpec, progress: bool = True) -> LoadResult:
    """Create spec.count pods at spec.rate with spec.concurrency requests in flight, within spec.timeout."""
    if spec.count < 1 or spec.concurrency < 1 or spec.rate <= 0 or spec.timeout <= 0:
        raise ValueError("count, concurrency, rate and timeout must be positive")
    with kube.client() as client:
        ensure_namespace(client, spec.namespace)
    result = LoadResult(spec.run_id, spec.count)
    asyncio.run(_run(kube, spec, result, progress))
    return result


def wait_bound(kube: Kube, namespace: str, run_id: str, timeout: float) -> int:
    """Wait until every pod of a load run is bound, or `timeout` seconds; how many are left unbound."""
    deadline = time.monotonic() + timeout
    with kube.client() as client:
        while True:
            left = sum(1 for p in client.list(Pod, namespace=namespace, labels={LOAD_LABEL: run_id})
                       if not p["spec"].get("nodeName"))
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(0.5)


def clean(client: Client, namespace: str, run_id: str | None = None, timeout: float = 120.0) -> int:
    """Delete what a load made and wait until it is gone; returns how many pods there were.

    One run: its pods (by label), with grace period 0. Every run in a namespace of its own: the
    namespace, and once it is terminating its pods with grace period 0 (the namespace controller
    deletes the rest). In a system namespace (`default`, …), which is never deleted: every load pod
    in it."""
    labels: dict[str, Any] = {LOAD_LABEL: run_id}  # None: any run
    pods = list(client.list(Pod, namespace=namespace, labels=labels))
    if run_id is None and namespace not in SYSTEM_NAMESPACES:
        delete_namespace(client, namespace, timeout, pods_at_once=True)
        return len(pods)
    delete_pods(client, namespace, (p["metadata"]["name"] for p in pods))
    deadline = time.monotonic() + timeout
    while list(client.list(Pod, namespace=namespace, labels=labels, chunk_size=1)):
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"load pods in {namespace} still there {timeout:.0f}s after their deletion: is KWOK "
                              "(which finishes the deletion of bound pods) running?")
        time.sleep(0.2)
    return len(pods)
