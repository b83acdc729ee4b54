"""One cell per Kubernetes release the rig builds: its control plane (etcd, kube-apiserver,
kube-controller-manager, KWOK) and its kube-scheduler through the proxy bind a few pods, and the target
names the release built. Short by design (3 nodes, 10 pods): under a minute a release once its binaries
are cached.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from kube_fault_proxy.rig.cluster import build, versions
from kube_fault_proxy.rig.cluster.control_plane import Options, running
from kube_fault_proxy.rig.invariants import check
from kube_fault_proxy.rig.pytest_plugin import Faults, ProxyHandle
from kube_fault_proxy.rig.workloads import load

ROOT = Path(__file__).resolve().parents[2]
PODS = 10
CELL_SECONDS = 60.0


@pytest.mark.parametrize("release", versions.RELEASES)
def test_release_binds_pods_through_the_proxy(tmp_path: Path, release: str) -> None:
    build.build_all(["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok"],
                    overrides=build.components(release))  # once per release, outside the cell's time
    t0 = time.monotonic()
    opts = Options(state_dir=tmp_path / "cluster", nodes=3, scheduler="kube-scheduler", proxy=True,
                   profiles_dir=ROOT / "fault_profiles", kubernetes=release)
    with running(opts) as c:
        assert c.targets["kube-scheduler"] == f"kube-scheduler {release}"
        assert c.state.builds["kube-apiserver"] == release
        assert c.state.builds["etcd"] == versions.line(release).etcd
        # The apiserver says which release it is (its /version, through kubectl of the same release).
        kubectl = build.kubernetes("kubectl", release).binary
        served = subprocess.run([str(kubectl), "--kubeconfig", str(c.kubeconfig("admin")), "version", "-o", "json"],
                                capture_output=True, text=True, timeout=30)
        assert served.returncode == 0, served.stderr
        versions_seen = json.loads(served.stdout)
        assert versions_seen["serverVersion"]["gitVersion"] == release, served.stdout
        assert versions_seen["clientVersion"]["gitVersion"] == release, served.stdout
        faults = Faults(ProxyHandle(c.control_url), None)
        faults.reset()
        before = faults.stats()["bindsTotal"]["succeeded"]
        api = c.admin_api()
        namespace = "release-cell"
        loaded = load.create_pods(api, load.LoadSpec(count=PODS, rate=100, concurrency=4, namespace=namespace),
                                  progress=False)
        assert loaded.created == PODS
        with api.client() as client:
            snap, _ = check.wait_quiet(lambda: check.fetch(client, None), 2.0, 40.0, done=check.all_bound(namespace))
        bound = [p for p in snap.pods if p["metadata"].get("namespace") == namespace and p["spec"].get("nodeName")]
        assert len(bound) == PODS
        assert faults.stats()["bindsTotal"]["succeeded"] - before == PODS  # each Binding went through the proxy
        report = check.evaluate(snap, {"default-scheduler"}, grace=0, namespace=namespace)
        assert report.ok, check.render(report)
    seconds = time.monotonic() - t0
    print(f"{release}: {PODS} pods bound through the proxy, cell {seconds:.1f}s")
    assert seconds < CELL_SECONDS, f"the {release} cell took {seconds:.0f}s"
