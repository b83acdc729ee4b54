"""Held-back bursts: a load created out of the scheduler's reach, released as one wave, and the wave measured."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from lightkube.types import PatchType

from kube_fault_proxy.kube.kubeapi import HTTPError, Kube, Pod
from kube_fault_proxy.rig.cluster.record import Cluster
from kube_fault_proxy.rig.cluster.schedulers import start_scheduler, stop_scheduler
from kube_fault_proxy.rig.workloads import pod_posts

# The scheduling gate every held-back pod is created with (spec.schedulingGates): the scheduler keeps
# a gated pod out of its queues until the gate is gone, and a gate can only ever be removed.
GATE = "kube-fault-proxy/held-back"


def lift_gates(kube: Kube, namespace: str, names: Sequence[str], concurrency: int) -> tuple[float, int]:
    """Remove every pod's scheduling gates, `concurrency` merge patches in flight; (seconds, patches failed)."""
    return asyncio.run(_lift(kube, namespace, list(names), max(1, concurrency)))


async def _lift(kube: Kube, namespace: str, names: list[str], concurrency: int) -> tuple[float, int]:
    start, failed = time.monotonic(), 0
    queue = list(reversed(names))
    endpoint = pod_posts.Endpoint.of(kube)  # the load's own connections (lightkube if it cannot)
    patch = {"spec": {"schedulingGates": None}}
    async with kube.async_client() as client:  # HTTP/1.1: a connection per patch in flight
        async def worker() -> None:
            nonlocal failed
            conn = pod_posts.Connection(endpoint) if endpoint else None
            try:
                while queue:
                    name = queue.pop()
                    try:
                        if conn is not None:
                            code, _ = await conn.send("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}", patch,
                                                      "application/merge-patch+json")
                            failed += code != 200
                        else:
                            await client.patch(Pod, name, patch, namespace=namespace, patch_type=PatchType.MERGE)
                    except (HTTPError, pod_posts.Unreachable):
                        failed += 1
            finally:
                if conn is not None:
                    await conn.close()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.monotonic() - start, failed


def pending(kube: Kube, namespace: str, label: str, run_id: str) -> int:
    """How many pods of the load have no node."""
    with kube.client() as api:
        return sum(1 for p in api.list(Pod, namespace=namespace, labels={label: run_id})
                   if not p["spec"].get("nodeName"))


@contextlib.contextmanager
def scheduler_stopped(cluster: Cluster | None) -> Iterator[Callable[[], float]]:
    """With a cluster: its scheduler stopped for the block; the block calls the yielded `release` to
    start it again (the seconds until it was ready), and leaves it running however it ends. Without
    one: nothing is stopped and `release` does nothing."""
    if cluster is None:
        yield lambda: 0.0
        return
    stop_scheduler(cluster)
    started = False

    def release() -> float:
        nonlocal started
        started = True
        return start_scheduler(cluster)

    try:
        yield release
    finally:
        if not started:
            start_scheduler(cluster)


def summary(release: dict[str, Any], samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The wave as the run's samples saw it: released at `release["t"]` with `release["pending"]` pods
    pending; bound until the load's bound count stopped growing; binds/s over that span (1 s samples)."""
    t = float(release["t"])
    before = [s for s in samples if s["t"] <= t]
    after = [s for s in samples if s["t"] > t]
    bound0 = before[-1]["bound"] if before else 0
    out = {**release, "waveBound": 0, "boundSeconds": None, "bindsPerSecond": None}
    if not after:
        return out
    final = max(s["bound"] for s in after)
    end = next(s for s in after if s["bound"] == final)
    out["waveBound"] = final - bound0
    out["boundSeconds"] = round(end["t"] - t, 2)
    if end["t"] > t and final > bound0:
        out["bindsPerSecond"] = round((final - bound0) / (end["t"] - t), 1)
    return out
