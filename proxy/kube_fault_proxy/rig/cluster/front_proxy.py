"""kube-fault-proxy in front of the local control plane's kube-apiserver (`cluster up --proxy`): its start, and
the kubeconfigs that send a client through it."""

from __future__ import annotations

from pathlib import Path

from kube_fault_proxy.rig.cluster import kubeconfigs, state
from kube_fault_proxy.rig.cluster.proxy_process import ServeFailed, start_serve
from kube_fault_proxy.rig.cluster.record import Cluster, ClusterError
from kube_fault_proxy.rig.cluster.startup import say

# The token users whose clients may go through the proxy: each gets a `<who>-via-proxy` kubeconfig.
VIA_PROXY = ("scheduler", "yunikorn", "admin", "controller-manager")


def start(c: Cluster, profiles_dir: Path, profile: str | None, max_streams: int, timeout: float) -> None:
    """Start `serve` against the apiserver, record where it listens, and write the kubeconfigs through it."""
    d = c.dir
    # Port 0: the proxy binds both ports itself and names them in its ready file (a port picked here and
    # released would be free only until someone else took it: a run beside other suites lost its
    # control port that way, "address already in use").
    args = ["--kubeconfig", str(c.kubeconfig("proxy-upstream")), "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0",
            "--profiles", str(profiles_dir), "--journal", str(c.journal),
            "--confdir", str(d / "proxy-ca"), "--max-concurrent-streams", str(max_streams)]
    if profile:
        args += ["--profile", profile]
    if c.scheduler_build:
        args += ["--scheduler-build", c.scheduler_build]
    try:
        served = start_serve(args, d / "proxy.json", c.log("kube-fault-proxy"), timeout=timeout, new_session=True)
    except ServeFailed as e:
        raise ClusterError(str(e)) from None
    c.record("kube-fault-proxy", served.pid, served.log)
    info = served.ready
    c.state.proxy = state.ProxyRecord(url=info["proxyUrl"], control=info["controlUrl"], ca_file=info["caFile"])
    proxy_ca = Path(info["caFile"]).read_bytes()
    kc = d / "kubeconfigs"
    for who in VIA_PROXY:
        token = c.state.tokens[who]
        c.state.kubeconfigs[f"{who}-via-proxy"] = str(
            kubeconfigs.write(kc / f"{who}-via-proxy.kubeconfig", info["proxyUrl"], proxy_ca, {"token": token}))
    say(f"  kube-fault-proxy on {info['proxyUrl']}, control plane {info['controlUrl']}")
