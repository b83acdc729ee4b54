"""Waiting for a component of the local control plane to answer ready, on a port that may be lost to another
process before the component binds it; progress on stderr. Each component's lifecycle starts through here."""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from kube_fault_proxy.kube.kubeapi import HTTPError
from kube_fault_proxy.rig.cluster.processes import PORT_TAKEN, alive, free_port, log_size, said_since
from kube_fault_proxy.rig.cluster.record import ClusterError


def say(msg: str) -> None:
    """Progress on stderr."""
    print(msg, file=sys.stderr, flush=True)


def tail(log: Path, lines: int = 15) -> str:
    """The last lines of a component's log, for an error that points at it ("" when it cannot be read)."""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def wait_ready(what: str, check: Callable[[], bool], pid: int, log: Path, timeout: float) -> None:
    """Until `check` answers True; a ClusterError naming the last attempt and the log's tail if the process
    exits first or `timeout` passes."""
    deadline = time.monotonic() + timeout
    last = "it never answered ready"
    while time.monotonic() < deadline:
        if not alive(pid):
            raise ClusterError(f"{what} exited during startup; see {log}:\n{tail(log)}")
        try:
            if check():
                return
            last = "it answered, but not ready"
        except (httpx.HTTPError, HTTPError, OSError) as e:  # e.g. a certificate the client refuses: say so
            last = f"{type(e).__name__}: {e}"
        time.sleep(0.1)
    raise ClusterError(f"{what} not ready after {timeout:.0f}s (last attempt: {last}); see {log}:\n{tail(log)}")


def on_a_free_port(what: str, start: Callable[[int], int], ready: Callable[[int], bool], log: Path,
                   timeout: float, tries: int = 3) -> int:
    """Start a component that cannot bind port 0 itself (kube-apiserver refuses 0; kube-scheduler,
    kube-controller-manager and KWOK turn their serving off with it) on a port free a moment ago, and
    pick another if something took it in between (the component exits saying so). The port it serves on."""
    for attempt in range(1, tries + 1):
        port, offset = free_port(), log_size(log)
        pid = start(port)
        try:
            wait_ready(what, functools.partial(ready, port), pid, log, timeout)
            return port
        except ClusterError:
            if attempt == tries or alive(pid) or not said_since(log, offset, PORT_TAKEN):
                raise
            say(f"  {what}: port {port} was taken before it could bind it; trying another")
    raise AssertionError("unreachable")
