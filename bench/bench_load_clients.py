"""Pods/s created by the load generator's loop with each Kubernetes client, against one real apiserver.

Same pacing (a shared schedule at --rate), the same in-flight bound (--concurrency) and the same pod
manifest for every client; rounds alternate between clients and the median is reported. Run it on
an otherwise idle local control plane without a scheduler:

    kube-fault-proxy cluster up --nodes 10 --scheduler none --state-dir /tmp/kfp-bench/cluster
    .venv/bin/python bench/bench_load_clients.py --kubeconfig /tmp/kfp-bench/cluster/kubeconfigs/admin.kubeconfig
    kube-fault-proxy cluster down --state-dir /tmp/kfp-bench/cluster

`kubernetes-asyncio` is not a dependency of kube-fault-proxy: `pip install kubernetes-asyncio` to
include it (it is skipped otherwise).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from kube_fault_proxy.kube.kubeapi import Kube, Pod, ensure_namespace
from kube_fault_proxy.rig.workloads.load import LoadSpec, pod_manifest

Create = Callable[[dict[str, Any]], Awaitable[bool]]


async def paced(spec: LoadSpec, create: Create) -> tuple[int, float]:
    """(pods created, seconds) for spec.count creations at spec.rate, spec.concurrency in flight."""
    start = time.monotonic()
    next_at = start
    interval = 1.0 / spec.rate
    todo = iter(range(spec.count))
    created = 0

    async def worker() -> None:
        nonlocal next_at, created
        for i in todo:
            now = time.monotonic()
            at = max(next_at, now)
            next_at = at + interval
            await asyncio.sleep(at - now)
            if await create(pod_manifest(spec, f"b-{spec.run_id}-{i:05d}")):
                created += 1

    await asyncio.gather(*(worker() for _ in range(spec.concurrency)))
    return created, time.monotonic() - start


async def with_httpx(kubeconfig: Path, spec: LoadSpec, http2: bool = True) -> tuple[int, float]:
    """The hand-made load loop lightkube replaced: one httpx.AsyncClient (HTTP/2, or HTTP/1.1 with a
    connection per request in flight), a bearer token, JSON dicts."""
    import ssl

    config = Kube.from_kubeconfig(kubeconfig).config
    assert config.user is not None and config.user.token and config.cluster.certificate_auth
    verify = ssl.create_default_context(cafile=str(config.abs_file(config.cluster.certificate_auth)))
    path = f"/api/v1/namespaces/{spec.namespace}/pods"
    async with httpx.AsyncClient(base_url=config.cluster.server, http2=http2, verify=verify,
                                 headers={"Authorization": f"Bearer {config.user.token}"},
                                 limits=httpx.Limits(max_connections=spec.concurrency)) as client:
        async def create(pod: dict[str, Any]) -> bool:
            return (await client.post(path, json=pod)).status_code == 201
        return await paced(spec, create)


async def with_lightkube(kubeconfig: Path, spec: LoadSpec, http2: bool) -> tuple[int, float]:
    """lightkube's AsyncClient (httpx2 + msgspec), pods as plain dicts (a generic resource)."""
    from lightkube import AsyncClient, KubeConfig

    client = AsyncClient(KubeConfig.from_file(str(kubeconfig)), http2=http2)
    try:
        async def create(pod: dict[str, Any]) -> bool:
            await client.create(Pod(pod), namespace=spec.namespace)
            return True
        return await paced(spec, create)
    finally:
        await client.close()


async def with_kubernetes_asyncio(kubeconfig: Path, spec: LoadSpec, models: bool = False) -> tuple[int, float]:
    """kubernetes-asyncio (aiohttp, HTTP/1.1): CoreV1Api.create_namespaced_pod with a dict body; the
    answer read raw (its status checked), or decoded into its generated V1Pod model."""
    from kubernetes_asyncio import client as kc
    from kubernetes_asyncio import config as kconfig

    cfg = kc.Configuration()
    await kconfig.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    cfg.connection_pool_maxsize = spec.concurrency
    async with kc.ApiClient(cfg) as api:
        core = kc.CoreV1Api(api)

        async def create(pod: dict[str, Any]) -> bool:
            if models:
                await core.create_namespaced_pod(spec.namespace, pod)  # raises unless 2xx
                return True
            r = await core.create_namespaced_pod(spec.namespace, pod, _preload_content=False)
            await r.read()  # as every other client here does: the answer is read
            r.release()
            return bool(r.status == 201)
        return await paced(spec, create)


def with_kubernetes(kubeconfig: Path, spec: LoadSpec) -> tuple[int, float]:
    """The official client (urllib3, HTTP/1.1, synchronous): one thread per request in flight."""
    from kubernetes import client as kc
    from kubernetes import config as kconfig

    cfg = kc.Configuration()
    kconfig.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    cfg.connection_pool_maxsize = spec.concurrency
    core = kc.CoreV1Api(kc.ApiClient(cfg))
    lock = threading.Lock()
    start = time.monotonic()
    next_at = start
    interval = 1.0 / spec.rate

    def one(i: int) -> bool:
        nonlocal next_at
        with lock:
            now = time.monotonic()
            at = max(next_at, now)
            next_at = at + interval
        time.sleep(max(0.0, at - now))
        r = core.create_namespaced_pod(spec.namespace, pod_manifest(spec, f"b-{spec.run_id}-{i:05d}"),
                                       _preload_content=False)
        return bool(r.status == 201)

    with ThreadPoolExecutor(spec.concurrency) as pool:
        created = sum(pool.map(one, range(spec.count)))
    return created, time.monotonic() - start


CLIENTS: dict[str, Callable[[Path, LoadSpec], tuple[int, float]]] = {
    "httpx-h2 (today)": lambda k, s: asyncio.run(with_httpx(k, s)),
    "httpx-h1": lambda k, s: asyncio.run(with_httpx(k, s, http2=False)),
    "lightkube-h2": lambda k, s: asyncio.run(with_lightkube(k, s, http2=True)),
    "lightkube-h1": lambda k, s: asyncio.run(with_lightkube(k, s, http2=False)),
    "kubernetes-asyncio": lambda k, s: asyncio.run(with_kubernetes_asyncio(k, s)),
    "kubernetes-asyncio models": lambda k, s: asyncio.run(with_kubernetes_asyncio(k, s, models=True)),
    "kubernetes (threads)": with_kubernetes,
}


def clean(kube: Kube, namespace: str) -> None:
    """Delete every pod in the namespace at once (grace 0: KWOK finishes the bound ones immediately)."""
    client = kube.client()
    client.deletecollection(Pod, namespace=namespace, grace_period=0)
    while list(client.list(Pod, namespace=namespace, chunk_size=1)):
        time.sleep(0.5)
    client.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kubeconfig", type=Path, required=True)
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--rate", type=float, default=2000.0)
    p.add_argument("--concurrency", type=int, action="append", help="repeatable (default: 8 and 32)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--namespace", default="bench")
    p.add_argument("--only", action="append", help="client names to run (default: all available)")
    p.add_argument("-o", "--output", type=Path)
    args = p.parse_args()
    api = Kube.from_kubeconfig(args.kubeconfig)
    ensure_namespace(api.client(), args.namespace)
    clients = {k: v for k, v in CLIENTS.items() if not args.only or k in args.only}
    try:
        import kubernetes_asyncio  # noqa: F401
    except ImportError:
        clients.pop("kubernetes-asyncio", None)
        clients.pop("kubernetes-asyncio models", None)
    results: dict[str, dict[str, list[float]]] = {}
    cpus: dict[str, dict[str, list[float]]] = {}  # this process's CPU seconds per run (the client's cost)
    for concurrency in args.concurrency or [8, 32]:
        for r in range(args.rounds):
            for name, run in clients.items():
                clean(api, args.namespace)
                spec = LoadSpec(count=args.count, rate=args.rate, concurrency=concurrency, namespace=args.namespace)
                cpu0 = time.process_time()
                created, seconds = run(args.kubeconfig, spec)
                cpu = time.process_time() - cpu0
                rate = created / seconds
                results.setdefault(f"c{concurrency}", {}).setdefault(name, []).append(rate)
                cpus.setdefault(f"c{concurrency}", {}).setdefault(name, []).append(cpu)
                print(f"round {r + 1} concurrency {concurrency:>3} {name:<22} {created} pods in {seconds:5.2f}s "
                      f"= {rate:6.0f}/s, client CPU {cpu:.2f}s", flush=True)
    clean(api, args.namespace)
    summary = {c: {name: {"podsPerSecond": round(statistics.median(rates)),
                          "clientCpuSeconds": round(statistics.median(cpus[c][name]), 2)}
                   for name, rates in per.items()} for c, per in results.items()}
    print(json.dumps(summary, indent=1))
    if args.output:
        args.output.write_text(json.dumps({"medians": summary, "rates": results, "cpu": cpus}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
