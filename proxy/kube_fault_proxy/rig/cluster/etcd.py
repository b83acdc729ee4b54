"""etcd on the local control plane: one member, its data under the state directory, on a port it picks itself."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import httpx

from kube_fault_proxy.rig.cluster.record import Cluster
from kube_fault_proxy.rig.cluster.startup import wait_ready


def client_url(log: Path) -> str | None:
    """The client URL etcd serves on, from its own log (it binds port 0 itself)."""
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if '"msg":"serving client traffic insecurely' in line:
            with contextlib.suppress(json.JSONDecodeError, KeyError):
                return f"http://{json.loads(line)['address']}"
    return None


def start(c: Cluster, binary: Path, timeout: float) -> str:
    """Start etcd and wait until it answers healthy; its client URL.

    etcd binds port 0 itself and names the port in its log (at level info: "serving client traffic");
    one member, so its peer URL is never dialled and port 0 does for it too."""
    log = c.log("etcd")
    pid = c.start("etcd", [str(binary), "--name", "kfp", "--data-dir", str(c.dir / "etcd"),
                           "--listen-client-urls", "http://127.0.0.1:0", "--advertise-client-urls", "http://127.0.0.1:0",
                           "--listen-peer-urls", "http://127.0.0.1:0",
                           "--initial-advertise-peer-urls", "http://127.0.0.1:0",
                           "--initial-cluster", "kfp=http://127.0.0.1:0", "--unsafe-no-fsync",
                           # etcd compacts nothing by itself (its default, said out loud): the apiserver's
                           # compactor alone decides how much history a stale LIST can be served from.
                           "--auto-compaction-retention=0",
                           "--log-level", "info"], log)
    found: list[str] = []

    def ready() -> bool:
        url = found[0] if found else client_url(log)
        if url is None:
            return False
        found[:] = [url]
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    wait_ready("etcd", ready, pid, log, timeout)
    return found[0]
