"""The image, built with podman on a debootstrap base, proxying the local control plane from its container."""

from __future__ import annotations

import json
import ssl
import uuid
from pathlib import Path

import httpx
import pytest
from kube_fault_proxy.rig.cluster.record import Cluster

from tests.container.engine import IMAGE, Engine, journal, write_upstream_kubeconfig
from tests.support.cluster import kfp, wait_for

pytestmark = [pytest.mark.container, pytest.mark.cluster]


def test_the_image_relays_switches_a_profile_and_journals_into_its_volume(
        engine: Engine, control_plane: Cluster, tmp_path: Path) -> None:
    c = control_plane
    kubeconfigs = tmp_path / "kubeconfigs"
    write_upstream_kubeconfig(c, kubeconfigs)
    name = f"kfp-image-{uuid.uuid4().hex[:8]}"
    engine.podman("volume", "create", name)
    try:
        # Host networking, as docker-compose.yaml runs it; ports 0 so nothing collides, named in the ready file.
        engine.podman("run", "-d", "--name", name, "--network", "host",
                      "-v", f"{kubeconfigs}:/kubeconfigs:ro", "-v", f"{name}:/state", IMAGE,
                      "serve", "--kubeconfig", "/kubeconfigs/upstream.kubeconfig", "--profiles", "/fault_profiles",
                      "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0",
                      "--journal", "/state/journal.jsonl", "--confdir", "/state/ca", "--ready-file", "/state/ready.json")
        state = engine.volume_dir(name)
        try:
            wait_for("the containerised proxy's ready file", (state / "ready.json").exists, 60, 0.2)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{engine.logs(name)}") from None
        ready = json.loads((state / "ready.json").read_text())
        ca = state / Path(ready["caFile"]).relative_to("/state")
        token = c.state.tokens["admin"]
        with c.admin_api().client() as direct:
            from lightkube.resources.core_v1 import Node

            nodes = sorted(n.metadata.name for n in direct.list(Node) if n.metadata and n.metadata.name)
        with httpx.Client(base_url=ready["proxyUrl"], verify=ssl.create_default_context(cafile=str(ca)), timeout=30,
                          headers={"Authorization": f"Bearer {token}"}) as http:
            # The wire: a LIST through the container reaches the real apiserver (its nodes, its answer).
            r = http.get("/api/v1/nodes")
            assert r.status_code == 200, r.text
            assert sorted(n["metadata"]["name"] for n in r.json()["items"]) == nodes and len(nodes) == 5
            # A profile switched through the control port takes effect on the next request.
            switched = kfp("ctl", "--control", ready["controlUrl"], "activate", "apf-throttle-lists")
            assert switched.returncode == 0, switched.stderr
            r = http.get("/api/v1/nodes")
            assert (r.status_code, r.headers.get("Retry-After")) == (429, "2"), r.text
        # The journal is in the volume, read from the host.
        records = journal(state / "journal.jsonl")
        events = [rec["event"] for rec in records]
        assert events[0] == "proxy-start", events
        assert [rec["profile"] for rec in records if rec["event"] == "activate"] == ["apf-throttle-lists"]
        injected = [rec for rec in records if rec["event"] == "inject"]
        assert len(injected) == 1 and injected[0]["request"]["resource"] == "nodes", injected
    finally:
        engine.podman("rm", "-f", "-t", "2", name)
        engine.podman("volume", "rm", name)
