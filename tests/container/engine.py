"""The container engine the container tests drive: podman as scripts/container-setup leaves it, and the image."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kube_fault_proxy.rig.cluster.control_plane import Cluster

from tests.support.processes import ROOT

# scripts/container-setup makes this base (Debian 13, Python 3.13) with debootstrap; the tests build on it.
BASE_IMAGE = "localhost/kube-fault-proxy-base:trixie-1"
# The tag docker-compose.yaml names (podman keeps local images under localhost/).
IMAGE = "localhost/kube-fault-proxy:local"


@dataclass(frozen=True)
class Engine:
    """podman with the project's containers.conf."""

    env: dict[str, str]

    def podman(self, *args: str, timeout: float = 300) -> str:
        """Run podman; fail the test with its stderr if it fails."""
        r = subprocess.run(["podman", *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, f"podman {' '.join(args)}: exit {r.returncode}\n{r.stderr[-3000:]}"
        return r.stdout

    def compose(self, project: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
        """podman-compose (from the project's .venv) in a project directory."""
        r = subprocess.run([str(ROOT / ".venv" / "bin" / "podman-compose"), *args], cwd=project,
                           env={**self.env, **(env or {})}, capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, f"podman-compose {' '.join(args)}: exit {r.returncode}\n{r.stdout[-2000:]}\n" \
                                  f"{r.stderr[-3000:]}"
        return r.stdout

    def volume_dir(self, volume: str) -> Path:
        """Where a named volume's files are on the host."""
        return Path(self.podman("volume", "inspect", "--format", "{{.Mountpoint}}", volume).strip())

    def logs(self, container: str) -> str:
        """A container's output, for a failure's message."""
        r = subprocess.run(["podman", "logs", container], env=self.env, capture_output=True, text=True, timeout=30)
        return (r.stdout + r.stderr)[-3000:]


def set_up() -> Engine:
    """scripts/container-setup (installs nothing and builds nothing once done) and the engine it configured."""
    r = subprocess.run([str(ROOT / "scripts" / "container-setup")], capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, f"scripts/container-setup: exit {r.returncode}\n{r.stderr[-3000:]}"
    return Engine({**os.environ, "CONTAINERS_CONF": r.stdout.strip().splitlines()[-1]})


def host_ca_bundle() -> Path:
    """The CA bundle this host's pip trusts (here it includes a TLS-inspecting egress's CA)."""
    return Path(os.environ.get("PIP_CERT") or ssl.get_default_verify_paths().cafile
                or "/etc/ssl/certs/ca-certificates.crt")


def build_image(engine: Engine) -> float:
    """The Dockerfile, built on the local base, tagged as docker-compose.yaml names it; returns the seconds.

    The build's pip trusts the host's CA bundle (mounted over the image's for the build only)."""
    t0 = time.monotonic()
    engine.podman("build", "--network", "host", "--build-arg", f"BASE={BASE_IMAGE}",
                  "--volume", f"{host_ca_bundle()}:/etc/ssl/certs/ca-certificates.crt:ro",
                  "-t", IMAGE, "-f", str(ROOT / "Dockerfile"), str(ROOT), timeout=1200)
    engine.podman("image", "prune", "-f")  # the image this build untagged: CI builds on every run
    return time.monotonic() - t0


def journal(path: Path) -> list[dict[str, Any]]:
    """The proxy's journal records, read from the host."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_upstream_kubeconfig(c: Cluster, kubeconfigs: Path) -> Path:
    """What a user copies to kubeconfigs/upstream.kubeconfig: the admin's, self-contained (CA inlined)."""
    doc = yaml.safe_load(c.kubeconfig("admin").read_text())
    cluster = doc["clusters"][0]["cluster"]
    cluster["certificate-authority-data"] = base64.b64encode(
        Path(cluster.pop("certificate-authority")).read_bytes()).decode()
    kubeconfigs.mkdir(parents=True, exist_ok=True)
    path = kubeconfigs / "upstream.kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path
