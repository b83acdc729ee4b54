"""docker-compose.yaml as shipped, brought up with podman-compose: YuniKorn in a container binds through the proxy's."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import httpx
import pytest
from kube_fault_proxy.rig.cluster.build import yunikorn
from kube_fault_proxy.rig.cluster.record import Cluster

from tests.container.engine import BASE_IMAGE, IMAGE, Engine, journal, write_upstream_kubeconfig
from tests.support.cluster import all_running, api_client, create_pods, kfp, make_namespace, wait_for
from tests.support.processes import ROOT

pytestmark = [pytest.mark.container, pytest.mark.cluster]

OVERRIDE = "docker-compose.yunikorn-local.yaml"


def healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_compose_runs_the_proxy_and_yunikorn_binds_through_it(
        engine: Engine, control_plane: Cluster, tmp_path: Path) -> None:
    c = control_plane
    # A project directory as a user has it: the two compose files, the library, their upstream kubeconfig.
    project = tmp_path / f"kfp{uuid.uuid4().hex[:8]}"
    project.mkdir()
    for name in ("docker-compose.yaml", OVERRIDE):
        shutil.copy(ROOT / name, project / name)
    shutil.copytree(ROOT / "fault_profiles", project / "fault_profiles")
    write_upstream_kubeconfig(c, project / "kubeconfigs")
    env = {"KFP_YUNIKORN_DIR": str(yunikorn().binary.parent), "KFP_BASE": BASE_IMAGE}
    files = ["-f", "docker-compose.yaml", "-f", OVERRIDE, "--profile", "yunikorn"]
    try:
        # The steps at the top of docker-compose.yaml; the proxy's image is the one the engine fixture built.
        assert IMAGE.removeprefix("localhost/") in (project / "docker-compose.yaml").read_text()
        engine.compose(project, "up", "-d", "proxy", env=env)
        wait_for("the proxy's /healthz on 127.0.0.1:7080", lambda: healthy("http://127.0.0.1:7080/healthz"), 60, 0.2)
        engine.compose(project, "run", "--rm", "proxy", "kubeconfig", "--kubeconfig",
                       "/kubeconfigs/upstream.kubeconfig", "--proxy-url", "https://127.0.0.1:7443",
                       "--ca", "/state/ca/mitmproxy-ca-cert.pem", "-o", "/kubeconfigs/scheduler-via-proxy.yaml",
                       env=env)
        assert (project / "kubeconfigs" / "scheduler-via-proxy.yaml").is_file()
        # Every bind held 2 s +/- 1 s: each one the proxy sees is journaled.
        switched = kfp("ctl", "--control", "http://127.0.0.1:7080", "activate", "bind-slow")
        assert switched.returncode == 0, switched.stderr
        engine.compose(project, *files, "build", "yunikorn", env=env)  # the rig's binary of today, not a cached one
        engine.compose(project, *files, "up", "-d", "yunikorn", env=env)
        wait_for("YuniKorn's healthcheck on 127.0.0.1:9080",
                 lambda: healthy("http://127.0.0.1:9080/ws/v1/scheduler/healthcheck"), 60, 0.5)
        api = api_client(c.kubeconfig("admin"))
        namespace = f"t-{uuid.uuid4().hex[:8]}"
        make_namespace(api, namespace)
        names = create_pods(api, namespace, 5, scheduler="yunikorn")
        wait_for("YuniKorn to bind every pod", lambda: all_running(api, namespace, names), 60)
        volume = engine.volume_dir(f"{project.name}_kfp-state")
        binds = {rec["request"]["name"] for rec in journal(volume / "journal.jsonl")
                 if rec["event"] == "inject" and rec["request"].get("subresource") == "binding"}
        assert binds == set(names)
    finally:
        engine.compose(project, *files, "down", "-v", "-t", "2", env=env)
