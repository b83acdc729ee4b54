"""Start test processes that announce readiness through a JSON file, and stop them cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kube_fault_proxy.rig.cluster.proxy_process import ProxyProcess, start_serve, stop_child

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Started:
    """A running process and what it wrote to its ready file."""

    proc: subprocess.Popen[bytes]
    ready: dict[str, Any]
    log: Path
    extra: dict[str, Any] = field(default_factory=dict)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL if it does not exit in time; returns the exit code."""
        return stop_child(self.proc, timeout)


def stop_or_dump(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> int:
    """`stop_child`, but a process that has not exited `timeout` s after SIGTERM first gets SIGABRT, whose
    faulthandler (PYTHONFAULTHANDLER, set by start_proxy) writes every thread's stack to its log."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
    return stop_child(proc, 5)  # its exit code; SIGKILL if even SIGABRT did not end it


def start(args: list[str], ready_file: Path, log: Path, timeout: float = 30.0,
          env: dict[str, str] | None = None) -> Started:
    """Run `python args…` from the repo root and wait for ready_file to appear."""
    ready_file.parent.mkdir(parents=True, exist_ok=True)
    ready_file.unlink(missing_ok=True)
    out = log.open("wb")
    proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready_file.exists() and ready_file.stat().st_size:
            try:
                return Started(proc, json.loads(ready_file.read_text()), log)
            except json.JSONDecodeError:
                pass
        if proc.poll() is not None:
            raise RuntimeError(f"{args[:3]} exited with {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.05)
    proc.kill()
    raise TimeoutError(f"{args[:3]} not ready after {timeout}s:\n{log.read_text()}")


def start_fake_apiserver(pki: Path, workdir: Path, port: int = 0,
                         require_client_cert: bool = True, idle_seconds: float | None = None) -> Started:
    """The local TLS + HTTP/2 stand-in apiserver (it closes a connection idle `idle_seconds`, by default an hour)."""
    args = ["-m", "tests.support.fake_apiserver", "--certs", str(pki),
            "--ready-file", str(workdir / "upstream.json"), "--port", str(port)]
    if idle_seconds is not None:
        args += ["--idle-seconds", str(idle_seconds)]
    if require_client_cert:
        args.append("--require-client-cert")
    return start(args, workdir / "upstream.json", workdir / "upstream.log")


def start_proxy(upstream_url: str, pki: Path, workdir: Path, *extra: str,
                env: dict[str, str] | None = None) -> ProxyProcess:
    """`kube-fault-proxy serve` in front of an upstream, on free ports, with its own state dir."""
    args = ["--upstream", upstream_url, "--upstream-ca", str(pki / "ca.pem"), "--client-cert", str(pki / "client.pem"),
            "--client-key", str(pki / "client.key"), "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0",
            "--journal", str(workdir / "journal.jsonl"), *extra]
    return start_serve(args, workdir / "proxy.json", workdir / "proxy.log", timeout=30, cwd=ROOT,
                       env={"KFP_STATE_DIR": str(workdir / "state"), "PYTHONFAULTHANDLER": "1", **(env or {})})
