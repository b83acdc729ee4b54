"""Hostile control-plane input against a real `serve`: refused cheaply, while proxied traffic flows."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.processes import Started, start_proxy

BOMB = ("a0: &a0 lol\n" + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10))
        + "spec: *a9\n")  # 597 bytes; expanded, 9^9 values (3.2 GB of RSS before this was bounded)
BOMB_9_6 = ("a0: &a0 lol\n" + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 7))
            + "spec: *a6\n")  # 435 bytes
HEADER = "apiVersion: kube-fault-proxy/v1\nkind: FaultProfile\nmetadata: {name: x}\n"


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


class Traffic:
    """A well-behaved HTTP/2 client sending GETs through the proxy until stopped."""

    def __init__(self, proxy: Started) -> None:
        self.proxy = proxy
        self.done: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(http2=True, verify=self.proxy.ready["caFile"], base_url=self.proxy.ready["proxyUrl"],
                          timeout=5) as c:
            deadline = time.monotonic() + 120  # bounded whatever happens
            while not self._stop.is_set() and time.monotonic() < deadline:
                try:
                    r = c.get("/api/v1/namespaces/default/pods")
                    if r.status_code != 200:
                        self.errors.append(str(r.status_code))
                except httpx.HTTPError as e:
                    self.errors.append(type(e).__name__)
                self.done.append(time.monotonic())
                time.sleep(0.01)

    def __enter__(self) -> Traffic:
        self._thread.start()
        while not self.done:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def longest_gap(self, since: float) -> float:
        times = [t for t in self.done if t >= since]
        return max((b - a for a, b in itertools.pairwise(times)), default=float("inf"))


@pytest.fixture
def own_proxy(upstream: Started, pki: Path, tmp_path: Path) -> Iterator[Started]:
    started = start_proxy(upstream.extra["url"], pki, tmp_path / "proxy")
    yield started
    assert started.stop() == 0, started.log.read_text()


def test_alias_bombs_and_big_bodies_are_refused_while_traffic_flows(own_proxy: Started) -> None:
    pid = own_proxy.proc.pid
    uploads = {
        "billion laughs (597 B)": (BOMB, 422, "refused: more than 8 aliases"),
        "9^6 laughs (435 B)": (BOMB_9_6, 422, "refused: more than 8 aliases"),
        "20,000 unknown keys": (HEADER + "spec: {" + ", ".join(f"k{i}: 1" for i in range(20_000)) + "}\n",
                                422, "refused: more than 20,000 values"),
        "9,000 unknown keys": (HEADER + "spec: {" + ", ".join(f"k{i}: 1" for i in range(9_000)) + "}\n",
                               422, "… and 8980 more problems"),
        "5 MB body": ("#" * 5_000_000, 413, "the request body is larger than 262,144 bytes"),
    }
    with httpx.Client(base_url=own_proxy.ready["controlUrl"], timeout=30) as control, Traffic(own_proxy) as traffic:
        time.sleep(0.5)
        rss_before = rss_bytes(pid)
        started = time.monotonic()
        for what, (body, status, message) in uploads.items():
            t0 = time.monotonic()
            r = control.put("/v1/profiles/x", content=body, headers={"content-type": "application/yaml"})
            took = time.monotonic() - t0
            assert r.status_code == status, (what, r.text[:300])
            assert message in r.json()["message"], (what, r.json()["message"][-300:])
            assert took < 3.0, (what, took)
        time.sleep(0.3)
        rss_after = rss_bytes(pid)
        gap = traffic.longest_gap(started)
    assert traffic.errors == []
    assert gap < 0.25, f"proxied traffic stalled for {gap:.2f}s"  # idle: ~50 ms; in-process parse: ~400 ms
    assert rss_after - rss_before < 64 * 2**20, (rss_before, rss_after)
    assert control_has_no_profile(own_proxy, "x")


def control_has_no_profile(proxy: Started, name: str) -> bool:
    return httpx.get(f"{proxy.ready['controlUrl']}/v1/profiles/{name}").status_code == 404


def test_a_chunked_body_over_the_limit_is_413(own_proxy: Started) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(40):
            yield b"#" * 10_000

    r = httpx.put(f"{own_proxy.ready['controlUrl']}/v1/profiles/x", content=chunks(), timeout=10)
    assert r.status_code == 413 and r.json()["error"] == "content too large"
