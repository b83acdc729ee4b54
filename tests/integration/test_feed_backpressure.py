"""Dashboard feed clients that never read are dropped within the bound the manual states, measured on a live
`serve` while injections flow: their descriptors come back, and a reading client and proxied GETs carry on."""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kube_fault_proxy.proxy.control.backlog import DRAIN_SECONDS

from tests.integration.conftest import activate
from tests.integration.test_request_faults import bind, pod
from tests.support.processes import Started, start_proxy

SILENT = 5  # clients that open the stream and never read
RCVBUF = 4096
TOLERANCE = 4.0  # seconds past DRAIN_SECONDS: one feed interval, the tick that notices, a loaded machine


@pytest.fixture
def serve(upstream: Started, pki: Path, tmp_path: Path) -> Iterator[Started]:
    started = start_proxy(upstream.extra["url"], pki, tmp_path)
    yield started
    assert started.stop() == 0, started.log.read_text()
    log = started.log.read_text()
    assert "Traceback" not in log and "ASGI" not in log, log[-3000:]


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Traffic(threading.Thread):
    """Binding POSTs (each injected, so each journaled and in the feed's frames) as fast as they go, and a
    pod GET through to the stand-in after every tenth (it ends a connection after 1,000 requests)."""

    def __init__(self, proxy: Started) -> None:
        super().__init__(daemon=True)
        self.proxy = proxy
        self.stop = threading.Event()
        self.get_seconds: list[float] = []
        self.errors: list[str] = []

    def run(self) -> None:
        with httpx.Client(http2=True, verify=self.proxy.ready["caFile"], base_url=self.proxy.ready["proxyUrl"],
                          timeout=10) as c:
            n = 0
            while not self.stop.is_set():
                try:
                    if (b := bind(c, pod())).status_code != 500:
                        self.errors.append(f"{time.monotonic():.1f} a Binding was not injected: {b.status_code}")
                    n += 1
                    if n % 10:
                        continue
                    started = time.monotonic()
                    if (g := c.get("/api/v1/namespaces/default/pods")).status_code != 200:
                        self.errors.append(f"{time.monotonic():.1f} a GET failed: {g.status_code} {g.text[:200]}")
                    self.get_seconds.append(time.monotonic() - started)
                except httpx.HTTPError as e:
                    self.errors.append(f"{time.monotonic():.1f} {e!r}")


class Reader(threading.Thread):
    """A feed client that reads everything, noting when each frame arrives."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.frames: list[float] = []
        self.stop = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        try:
            with httpx.stream("GET", f"{self.url}/v1/events/stream", timeout=10) as r:
                for line in r.iter_lines():
                    if line.startswith("event: "):
                        self.frames.append(time.monotonic())
                    if self.stop.is_set():
                        return
        except httpx.HTTPError as e:
            self.error = repr(e)


def silent_client(url: str) -> socket.socket:
    """A feed client with a 4 KiB receive buffer that sends its request and then never reads."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
    s.connect((host, int(port)))
    s.sendall(b"GET /v1/events/stream HTTP/1.1\r\nHost: x\r\n\r\n")
    return s


def dropped(control: httpx.Client) -> list[dict[str, object]]:
    records = control.get("/v1/journal", params={"since": 0, "limit": 10000}).json()["records"]
    return [r for r in records if r["event"] == "feed-client-dropped"]


def test_feed_clients_that_never_read_are_dropped_and_nothing_else_is(serve: Started) -> None:
    url, pid = serve.ready["controlUrl"], serve.ready["pid"]
    traffic, reader = Traffic(serve), Reader(url)
    with httpx.Client(base_url=url, timeout=10) as control:
        activate(control, "fail-binds", [{"name": "abort", "match": {"subresources": ["binding"]},
                                           "fault": {"abort": {"status": 500}}}])
        traffic.start()
        reader.start()
        time.sleep(3)  # both connections up, frames carrying the injections' journal records
        baseline = open_fds(pid)
        opened = time.monotonic()
        silent = [silent_client(url) for _ in range(SILENT)]
        try:
            deadline = opened + DRAIN_SECONDS + TOLERANCE
            while time.monotonic() < deadline and len(dropped(control)) < SILENT:
                time.sleep(0.2)
            took = time.monotonic() - opened
            drops = dropped(control)
            assert len(drops) == SILENT, f"{len(drops)} of {SILENT} dropped after {took:.1f}s"
            assert DRAIN_SECONDS - 1 <= took <= DRAIN_SECONDS + TOLERANCE, took
            assert all(int(str(d["unsentBytes"])) > 0 for d in drops), drops
            while open_fds(pid) > baseline and time.monotonic() < deadline + 2:
                time.sleep(0.1)
            assert open_fds(pid) <= baseline, (open_fds(pid), baseline)
            for s in silent:  # each was aborted: what it held, then a reset or the end
                s.settimeout(5)
                with pytest.raises(ConnectionResetError):
                    while s.recv(65536):
                        pass
                    raise ConnectionResetError("closed")  # an orderly end counts as closed too
            time.sleep(2)  # the reader and the traffic carry on after the drops
        finally:
            for s in silent:
                s.close()
            traffic.stop.set()
            reader.stop.set()
            traffic.join(15)
            reader.join(15)
        assert reader.error is None and traffic.errors == [], (opened, reader.error, traffic.errors[:5])
        during = [t for t in reader.frames if t >= opened]
        assert len(during) >= 2 * (DRAIN_SECONDS + 2) * 0.8  # 2 frames a second, throughout
        assert max(b - a for a, b in itertools.pairwise(during)) < 2.0
        assert len(traffic.get_seconds) > 20 and max(traffic.get_seconds) < 1.0, max(traffic.get_seconds)
