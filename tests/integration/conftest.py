"""A real `kube-fault-proxy serve` process in front of a local TLS + HTTP/2 upstream."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kube_fault_proxy.proxy.control.client import ControlClient

from tests.support.certs import make_pki
from tests.support.control import activate, injections
from tests.support.processes import Started
from tests.support.standin import pass_through, proxy_in_front, standin_upstream

__all__ = ["activate", "injections"]  # older tests import them from here; new ones from tests.support.control

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="session")
def upstream(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    with standin_upstream(pki, tmp_path_factory.mktemp("upstream")) as started:
        yield started


@pytest.fixture(scope="session")
def proxy(upstream: Started, pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    with proxy_in_front(upstream, pki, tmp_path_factory.mktemp("proxy")) as started:
        yield started


@pytest.fixture
def control(proxy: Started) -> Iterator[httpx.Client]:
    """The control plane, reset to pass-through with zeroed stats before and after each test."""
    with httpx.Client(base_url=proxy.ready["controlUrl"], timeout=10) as c:
        pass_through(c)
        c.headers["x-test-journal-cursor"] = str(ControlClient(c).cursor())  # where this test's records begin
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
