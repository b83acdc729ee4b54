"""The TLS + HTTP/2 stand-in apiserver and a `serve` in front of it, as plain context managers: the integration
and browser suites make fixtures of them, each with its own scope."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.support.processes import Started, start_fake_apiserver, start_proxy, stop_or_dump


@contextlib.contextmanager
def standin_upstream(pki: Path, workdir: Path) -> Iterator[Started]:
    """The stand-in apiserver; `extra["url"]` is where it listens."""
    started = start_fake_apiserver(pki, workdir)
    started.extra["url"] = f"https://127.0.0.1:{started.ready['port']}"
    try:
        yield started
    finally:
        started.stop()


@contextlib.contextmanager
def proxy_in_front(upstream: Started, pki: Path, workdir: Path, *extra: str) -> Iterator[Started]:
    """`kube-fault-proxy serve` in front of the stand-in; it must exit cleanly (0) when stopped."""
    started = start_proxy(upstream.extra["url"], pki, workdir, *extra)
    yield started
    code = stop_or_dump(started.proc)
    journal = workdir / "journal.jsonl"
    tail = "\n".join(journal.read_text(errors="replace").splitlines()[-15:]) if journal.exists() else ""
    assert code == 0, f"serve exited with {code}\n--- its log:\n{started.log.read_text()}\n--- journal tail:\n{tail}"


def pass_through(control: httpx.Client) -> None:
    """No profile active and zeroed stats."""
    control.delete("/v1/active").raise_for_status()
    control.post("/v1/stats/reset").raise_for_status()
