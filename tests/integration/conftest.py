"""A real `kube-fault-proxy serve` process in front of a local TLS + HTTP/2 upstream."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.certs import make_pki
from tests.support.processes import Started, start_fake_apiserver, start_proxy

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def upstream(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    started = start_fake_apiserver(pki, tmp_path_factory.mktemp("upstream"))
    started.extra["url"] = f"https://127.0.0.1:{started.ready['port']}"
    yield started
    started.stop()


@pytest.fixture(scope="session")
def proxy(upstream: Started, pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    started = start_proxy(upstream.extra["url"], pki, tmp_path_factory.mktemp("proxy"))
    yield started
    assert started.stop() == 0, started.log.read_text()


@pytest.fixture
def control(proxy: Started) -> Iterator[httpx.Client]:
    """The control plane, reset to pass-through with zeroed stats before and after each test."""
    with httpx.Client(base_url=proxy.ready["controlUrl"], timeout=10) as c:
        c.delete("/v1/active").raise_for_status()
        c.post("/v1/stats/reset").raise_for_status()
        cursor = c.get("/v1/journal", params={"since": 0, "limit": 10000}).json()["next"]
        c.headers["x-test-journal-cursor"] = str(cursor)  # where this test's records begin
        yield c
        c.delete("/v1/active").raise_for_status()


@pytest.fixture
def h2(proxy: Started) -> Iterator[httpx.Client]:
    """An HTTP/2 client of the proxy that trusts the proxy's CA."""
    with httpx.Client(http2=True, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"],
                      timeout=10) as c:
        yield c


@pytest.fixture
def direct(upstream: Started, pki: Path) -> Iterator[httpx.Client]:
    """An HTTP/2 client straight to the upstream (with the client certificate it requires)."""
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    ctx.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
    with httpx.Client(http2=True, verify=ctx, base_url=upstream.extra["url"], timeout=10) as c:
        yield c


def activate(control: httpx.Client, name: str, rules: list[dict[str, Any]],
             seed: int | None = None, ttl: float | None = None) -> dict[str, Any]:
    """Upload a profile made of these rules and make it active."""
    doc = {"apiVersion": "kube-fault-proxy/v1", "kind": "FaultProfile", "metadata": {"name": name},
           "spec": {"rules": rules}}
    control.put(f"/v1/profiles/{name}", json=doc).raise_for_status()
    body: dict[str, Any] = {"profile": name}
    if seed is not None:
        body["seed"] = seed
    if ttl is not None:
        body["ttlSeconds"] = ttl
    r = control.put("/v1/active", json=body)
    r.raise_for_status()
    return dict(r.json())


def injections(control: httpx.Client, since: int | None = None) -> list[dict[str, Any]]:
    """The journal's inject records written since the test began."""
    if since is None:
        since = int(control.headers["x-test-journal-cursor"])
    records = control.get("/v1/journal", params={"since": since, "limit": 10000}).json()["records"]
    return [r for r in records if r["event"] == "inject"]
