"""The container engine the container tests drive: podman as scripts/container-setup leaves it, and the image."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kube_fault_proxy.rig.cluster.record import Cluster

from tests.support.processes import ROOT

# scripts/container-setup makes this base (Debian 13, Python 3.13) with debootstrap; scripts/container-image and
# docker-compose.yunikorn-local.yaml build on it.
BASE_IMAGE = subprocess.run([str(ROOT / "scripts" / "container-setup"), "--base-image"], capture_output=True,
                            text=True, check=True).stdout.strip()
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


@dataclass(frozen=True)
class Built:
    """The engine scripts/container-setup configured and the image scripts/container-image built."""

    engine: Engine
    image_id: str
    seconds: float
    where: str  # "in the background" (scripts/test) or "now"


def built_image() -> Built:
    """podman set up by the project's script and the image built from the Dockerfile on the debootstrap base:
    by scripts/container-image, which scripts/test runs in the background while the unit tests run
    ($KFP_IMAGE_BUILD: the directory its output, exit status and seconds go to; waited for here), or now, when
    these tests run alone. Either way the tag must still name the image that run built."""
    background = os.environ.get("KFP_IMAGE_BUILD")
    if background:
        where = Path(background)
        deadline = time.monotonic() + 1800
        while not (where / "rc").exists():
            assert time.monotonic() < deadline, f"scripts/container-image did not finish (in {where})"
            time.sleep(1)
        rc, out = int((where / "rc").read_text()), (where / "out").read_text()
        err, seconds = (where / "err").read_text(), float((where / "seconds").read_text())
    else:
        t0 = time.monotonic()
        r = subprocess.run([str(ROOT / "scripts" / "container-image")], capture_output=True, text=True, timeout=1800)
        rc, out, err, seconds = r.returncode, r.stdout, r.stderr, time.monotonic() - t0
    assert rc == 0, f"scripts/container-image: exit {rc}\n{err[-3000:]}"
    conf, image_id = out.strip().splitlines()[-2:]
    engine = Engine({**os.environ, "CONTAINERS_CONF": conf})
    tagged = engine.podman("image", "inspect", "--format", "{{.Id}}", IMAGE).strip()
    assert tagged == image_id, f"{IMAGE} is {tagged}, not the {image_id} scripts/container-image built"
    return Built(engine, image_id, seconds, "in the background" if background else "now")


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
