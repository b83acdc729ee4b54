"""`kube-fault-proxy serve` as a child process: the one way the rig and the tests start it and wait for it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVE = (sys.executable, "-m", "kube_fault_proxy", "serve")


class ServeFailed(RuntimeError):
    """`serve` exited or never became ready; the message carries its log."""


@dataclass
class ProxyProcess:
    """A running `serve` and what its ready file says (proxyUrl, controlUrl, caFile, …)."""

    proc: subprocess.Popen[bytes]
    ready: dict[str, Any]
    log: Path

    @property
    def pid(self) -> int:
        """Its pid (with new_session, also its process group)."""
        return self.proc.pid

    @property
    def control_url(self) -> str:
        """Its control plane."""
        return str(self.ready["controlUrl"])

    @property
    def proxy_url(self) -> str:
        """Where it proxies."""
        return str(self.ready["proxyUrl"])

    @property
    def ca_file(self) -> str:
        """The CA its clients must trust."""
        return str(self.ready["caFile"])

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL if it does not exit in time; returns the exit code."""
        return stop_child(self.proc, timeout)


def stop_child(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> int:
    """SIGTERM a child process, then SIGKILL if it does not exit in time; returns its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    return int(proc.returncode)


def _read_ready(ready_file: Path) -> dict[str, Any] | None:
    if not ready_file.exists() or not ready_file.stat().st_size:
        return None
    try:
        info = json.loads(ready_file.read_text())
    except (json.JSONDecodeError, OSError):
        return None  # still being written
    return info if isinstance(info, dict) else None


def start_serve(args: Sequence[str], ready_file: Path, log: Path, *, timeout: float = 60.0,
                env: Mapping[str, str] | None = None, cwd: Path | None = None,
                new_session: bool = False) -> ProxyProcess:
    """Start `serve args… --ready-file READY_FILE`, logging to `log`, and wait for the ready file.

    `env` is added to this process's environment; `new_session` puts it in a process group of its own
    (the control plane stops its components by group)."""
    ready_file.parent.mkdir(parents=True, exist_ok=True)
    ready_file.unlink(missing_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen([*SERVE, *args, "--ready-file", str(ready_file)], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd,
                                env={**os.environ, **(env or {})}, start_new_session=new_session)
    deadline = time.monotonic() + timeout
    while True:
        info = _read_ready(ready_file)
        if info is not None:
            return ProxyProcess(proc, info, log)
        if proc.poll() is not None:
            raise ServeFailed(f"kube-fault-proxy serve exited with {proc.returncode}; see {log}:\n{_tail(log)}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait(5)
            raise ServeFailed(f"kube-fault-proxy serve not ready after {timeout:g}s; see {log}:\n{_tail(log)}")
        time.sleep(0.05)


def _tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
