"""kube-apiserver on the local control plane: its command line (recorded in the state, so a restart is the same
process on the same URL), its start, and the `kill -9` and restart a scenario action asks for."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from kube_fault_proxy.rig.cluster.processes import kill_group
from kube_fault_proxy.rig.cluster.record import Cluster, ClusterError
from kube_fault_proxy.rig.cluster.startup import on_a_free_port, wait_ready

ETCD_COMPACTION_INTERVAL = "10m"  # history the apiserver keeps in etcd: at least this, at most twice it


def argv(binary: Path, etcd_url: str, certs: Path, tokens: Path, port: int, max_streams: int,
         extra: Sequence[str] = ()) -> list[str]:
    """The command line: loopback only, the certificates in `certs`, token users from `tokens`, RBAC; `extra`
    last (feature gates, --runtime-config, a real node's flags)."""
    return [
        str(binary), f"--etcd-servers={etcd_url}", "--bind-address=127.0.0.1",
        f"--secure-port={port}", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
        f"--tls-cert-file={certs / 'apiserver.crt'}", f"--tls-private-key-file={certs / 'apiserver.key'}",
        f"--client-ca-file={certs / 'ca.crt'}", f"--token-auth-file={tokens}",
        "--authorization-mode=RBAC", "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-account-key-file={certs / 'sa.pub'}",
        f"--service-account-signing-key-file={certs / 'sa.key'}",
        "--service-cluster-ip-range=10.0.0.0/24",
        f"--http2-max-streams-per-connection={max_streams}",
        # Every interval the apiserver compacts etcd to the revision it noted one interval before, so
        # 10-20 minutes of history stay (the default 5m keeps 5-10): staleList serves LISTs from it.
        f"--etcd-compaction-interval={ETCD_COMPACTION_INTERVAL}",
        # SO_REUSEADDR: after a kill -9 (kill_apiserver) the same port binds again at once instead
        # of waiting out the killed connections' TIME_WAIT.
        "--permit-address-sharing", *extra]


def start(c: Cluster, binary: Path, etcd_url: str, certs: Path, max_streams: int, extra: Sequence[str],
          timeout: float) -> str:
    """Start kube-apiserver on a free port, record its URL and command line, and wait until it is ready; its URL."""

    def start_on(port: int) -> int:
        c.state.apiserver = f"https://127.0.0.1:{port}"
        c.state.apiserver_argv = argv(binary, etcd_url, certs, c.dir / "tokens.csv", port, max_streams, extra)
        return _spawn(c)
    port = on_a_free_port("kube-apiserver", start_on, lambda _: c.admin_api().ready(), c.log("kube-apiserver"),
                          timeout)
    return f"https://127.0.0.1:{port}"


def _spawn(c: Cluster) -> int:
    """kube-apiserver from the argv recorded in the state (flags, port, certificates and etcd); its pid."""
    log = c.log("kube-apiserver")
    if c.state.apiserver_argv is None:
        raise ClusterError(f"no kube-apiserver command line recorded in {c.dir}")
    return c.start("kube-apiserver", list(c.state.apiserver_argv), log)


def kill_apiserver(c: Cluster) -> int:
    """`kill -9` the real kube-apiserver (its process group), as the seed did; returns its pid.

    etcd, the proxy and every client stay up; `start_apiserver` brings it back on the same URL."""
    proc = c.state.processes.get("kube-apiserver")
    if proc is None or c.state.apiserver_argv is None:
        raise ClusterError(f"no kube-apiserver to kill in {c.dir}")
    pid = proc.pid
    if not kill_group(pid):
        raise ClusterError(f"kube-apiserver (pid {pid}) still runs after SIGKILL")
    c.state.processes.pop("kube-apiserver")
    c.save()
    return pid


def start_apiserver(c: Cluster, timeout: float = 120.0) -> float:
    """Start kube-apiserver again after `kill_apiserver`, exactly as `up` did (same port: its clients keep their
    URL); the seconds until it was ready."""
    t0 = time.monotonic()
    wait_ready("kube-apiserver", c.admin_api().ready, _spawn(c), c.log("kube-apiserver"), timeout)
    return time.monotonic() - t0
