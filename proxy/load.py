"""`load pods`: create pods at a rate, bounded in count and time, with progress and a summary."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from proxy.cluster.kubeapi import Api, ApiError
from proxy.console import Progress

LOAD_LABEL = "kube-fault-proxy/load"


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
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])


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


def pod_manifest(spec: LoadSpec, name: str) -> dict[str, Any]:
    """One pod of the load: a pause container with requests, labelled with the run id."""
    labels = {LOAD_LABEL: spec.run_id, **spec.labels}
    if spec.app_id:
        labels["applicationId"] = spec.app_id
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": spec.namespace, "labels": labels},
            "spec": {"schedulerName": spec.scheduler_name, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"requests": {"cpu": spec.cpu, "memory": spec.memory}}}]}}


def ensure_namespace(api: Api, namespace: str) -> None:
    """Create the namespace if it is not there."""
    api.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
               exist_ok=True)


async def _run(api: Api, spec: LoadSpec, result: LoadResult, progress: bool) -> None:
    start = time.monotonic()
    deadline = start + spec.timeout
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(spec.count):
        queue.put_nowait(i)
    interval = 1.0 / spec.rate
    next_at = start
    path = f"/api/v1/namespaces/{spec.namespace}/pods"

    async def pace() -> None:
        """A shared schedule: request k goes out no earlier than start + k/rate."""
        nonlocal next_at
        now = time.monotonic()
        at = max(next_at, now)
        next_at = at + interval
        await asyncio.sleep(at - now)

    async with api.async_client() as client:
        async def worker() -> None:
            while not queue.empty() and time.monotonic() < deadline:
                i = queue.get_nowait()
                await pace()
                name = f"load-{spec.run_id}-{i:05d}"
                try:
                    r = await client.post(path, json=pod_manifest(spec, name))
                    ok, why = r.status_code == 201, f"HTTP {r.status_code}"
                except httpx.HTTPError as e:
                    ok, why = False, type(e).__name__
                if ok:
                    result.created += 1
                    result.names.append(name)
                else:
                    result.failed += 1
                    result.errors[why] = result.errors.get(why, 0) + 1

        async def report(bar: Progress) -> None:
            while True:
                bar.update(result.created + result.failed, status=status())
                await asyncio.sleep(0.25)

        def status() -> str:
            elapsed = time.monotonic() - start
            return (f"sent, {result.created} created, {result.failed} failed, "
                    f"{result.created / elapsed if elapsed else 0:.0f}/s")

        with Progress("pods", spec.count, enabled=progress) as bar:
            reporter = asyncio.create_task(report(bar))
            try:
                await asyncio.gather(*(worker() for _ in range(max(1, spec.concurrency))))
            finally:
                reporter.cancel()
            bar.update(result.created + result.failed, status=status())
    result.seconds = time.monotonic() - start
    result.timed_out = result.created + result.failed < spec.count


def create_pods(api: Api, spec: LoadSpec, progress: bool = True) -> LoadResult:
    """Create spec.count pods at spec.rate with spec.concurrency requests in flight, within spec.timeout."""
    if spec.count < 1 or spec.concurrency < 1 or spec.rate <= 0 or spec.timeout <= 0:
        raise ValueError("count, concurrency, rate and timeout must be positive")
    ensure_namespace(api, spec.namespace)
    result = LoadResult(spec.run_id, spec.count)
    asyncio.run(_run(api, spec, result, progress))
    return result


def clean(api: Api, namespace: str, run_id: str | None = None) -> int:
    """Delete the pods a load made (one run, or every run); returns how many there were."""
    selector = f"{LOAD_LABEL}={run_id}" if run_id else LOAD_LABEL
    pods = api.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector)["items"]
    for pod in pods:
        try:
            api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}",
                        params={"gracePeriodSeconds": "0"})
        except ApiError as e:
            if e.status != 404:
                raise
    return len(pods)
