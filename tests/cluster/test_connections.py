"""A client-go burst through the proxy: one connection, not a storm (the proxy's own counters say so)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from kube_fault_proxy.rig.cluster.build import build, burst_client
from kube_fault_proxy.rig.cluster.proxy_process import ProxyProcess, start_serve
from kube_fault_proxy.rig.cluster.record import Cluster

from tests.support.processes import ROOT

BURST = 1500  # concurrent GETs, on top of 15 held watches, like a scheduler's informers


def run_burst(kubeconfig: Path, n: int = BURST) -> dict[str, Any]:
    """kfp-burst (client-go v0.35.5's transport, as YuniKorn v1.9.0 has it) against a kubeconfig."""
    r = subprocess.run([str(build(burst_client(), say=False)), "-kubeconfig", str(kubeconfig), "-n", str(n),
                        "-hold", "15", "-qps", "5000", "-burst", "5000"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))


def connections(control_url: str) -> dict[str, int]:
    return dict(httpx.get(f"{control_url}/v1/stats", timeout=10).json()["connections"])


def test_a_client_go_burst_shares_one_connection_through_the_proxy(kube_scheduler_cluster: Cluster) -> None:
    control = kube_scheduler_cluster.control_url
    before = connections(control)
    out = run_burst(kube_scheduler_cluster.kubeconfig("admin-via-proxy"))
    after = connections(control)
    assert out["succeeded"] == BURST, out["errors"]
    assert out["dialsInBurst"] == 0, out
    assert out["dials"] <= 2, out
    assert after["clientAccepted"] - before["clientAccepted"] <= 2, (before, after)
    assert after["upstreamOpened"] - before["upstreamOpened"] <= 2, (before, after)


def test_at_the_apiservers_default_of_100_streams_the_same_burst_storms(kube_scheduler_cluster: Cluster,
                                                                         tmp_path: Path) -> None:
    """The control: the counters do see a storm when there is one (hyper-h2's default, 100)."""
    proxy = start_storming_proxy(kube_scheduler_cluster, tmp_path)
    try:
        kc = tmp_path / "via-proxy-100.kubeconfig"
        subprocess.run([sys.executable, "-m", "kube_fault_proxy", "kubeconfig", "--kubeconfig",
                        str(kube_scheduler_cluster.kubeconfig("admin")), "--proxy-url", proxy.ready["proxyUrl"],
                        "--ca", proxy.ready["caFile"], "-o", str(kc)], check=True, capture_output=True)
        before = connections(proxy.ready["controlUrl"])
        out = run_burst(kc, n=600)
        after = connections(proxy.ready["controlUrl"])
        # In a storm some requests may time out in their TLS handshake (client-go allows 10 s): what
        # matters here is that each one ended and that the storm shows on both sides' counters.
        assert out["succeeded"] + sum(out["errors"].values()) == 600, out
        assert out["dialsInBurst"] > 100, out
        assert after["clientAccepted"] - before["clientAccepted"] > 100, (before, after)
    finally:
        assert proxy.stop() == 0, proxy.log.read_text()


def start_storming_proxy(c: Cluster, workdir: Path) -> ProxyProcess:
    args = ["--kubeconfig", str(c.kubeconfig("proxy-upstream")), "--listen", "127.0.0.1:0",
            "--control", "127.0.0.1:0", "--journal", str(workdir / "journal.jsonl"),
            "--confdir", str(workdir / "ca"), "--max-concurrent-streams", "100"]
    return start_serve(args, workdir / "proxy.json", workdir / "proxy.log", timeout=30, cwd=ROOT,
                       env={"KFP_STATE_DIR": str(workdir / "state")})
