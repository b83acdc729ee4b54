"""Installed the way users install it: the sdist and the wheel built from this checkout, the wheel installed into a
fresh virtualenv, every command run from an empty directory (so nothing can come from the checkout), and then
PyPI's `proxy.py`, which owns the top-level name `proxy`, installed beside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from kube_fault_proxy import __version__, shipped

from tests.support.processes import ROOT

pytestmark = pytest.mark.cluster

SHIPPED_PROFILES = shipped.names(shipped.PROFILES, ".yaml")


@dataclass
class Installed:
    venv: Path
    empty: Path  # the working directory of every command: nothing in it
    env: dict[str, str]

    def run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        exe = argv[0] if argv[0].startswith("/") else str(self.venv / "bin" / argv[0])
        return subprocess.run([exe, *argv[1:]], cwd=self.empty, env=self.env, capture_output=True, text=True,
                              timeout=timeout)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--sdist", "--wheel", "--outdir", str(out),
                        str(ROOT)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def installed(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("installed")
    venv, empty = base / "venv", base / "empty"
    empty.mkdir()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    wheel = next(dist.glob("*.whl"))
    r = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--progress-bar", "off",
                        str(wheel)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KFP_", "PYTHON", "VIRTUAL_ENV"))}
    env |= {"KFP_STATE_DIR": str(base / "state"), "PATH": f"{venv / 'bin'}:{env.get('PATH', '')}"}
    yield Installed(venv, empty, env)


def test_the_wheel_and_the_sdist_carry_what_a_user_needs(dist: Path) -> None:
    names = zipfile.ZipFile(next(dist.glob("*.whl"))).namelist()
    for name in SHIPPED_PROFILES:
        assert f"kube_fault_proxy/fault_profiles/{name}.yaml" in names
    assert "kube_fault_proxy/scenarios/yunikorn-3355.yaml" in names
    assert "kube_fault_proxy/patches/yunikorn/3355-forget-pod-reverts-with-expiry.patch" in names
    assert "kube_fault_proxy/rig/cluster/burst/main.go" in names and "kube_fault_proxy/rig/cluster/burst/go.sum" in names
    assert "kube_fault_proxy/proxy/control/ui/index.html" in names
    assert not [n for n in names if n.startswith(("proxy/", "tests/"))], "only kube_fault_proxy is installed"
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(next(dist.glob("*.whl"))).read(meta).decode()
    assert f"Version: {__version__}" in text and "Requires-Python: >=3.12" in text and "License-Expression: Apache-2.0" in text
    assert "Classifier: Framework :: Pytest" in text and "Project-URL: " in text
    sdist = next(dist.glob("*.tar.gz"))
    with tarfile.open(sdist) as t:
        members = t.getnames()
    assert any(m.endswith("proxy/kube_fault_proxy/scenarios/yunikorn-3355.yaml") for m in members)
    assert any(m.endswith("/LICENSE") for m in members)


def test_commands_run_from_an_empty_directory_with_the_shipped_library(installed: Installed, tmp_path: Path) -> None:
    for argv in (["kube-fault-proxy", "--help"], ["python", "-m", "kube_fault_proxy", "--help"]):
        r = installed.run(*argv)
        assert r.returncode == 0 and "kube-fault-proxy" in r.stdout, r.stderr
    r = installed.run("kube-fault-proxy", "profiles", "list")
    assert r.returncode == 0, r.stderr
    assert [line.split()[0] for line in r.stdout.splitlines() if line.strip()] == SHIPPED_PROFILES
    # serve with no --profiles and no ./fault_profiles: the shipped library
    ready = tmp_path / "ready.json"
    proc = subprocess.Popen([str(installed.venv / "bin" / "kube-fault-proxy"), "serve",
                             "--upstream", "https://127.0.0.1:9", "--insecure", "--listen", "127.0.0.1:0",
                             "--control", "127.0.0.1:0", "--ready-file", str(ready)],
                            cwd=installed.empty, env=installed.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            assert time.monotonic() < deadline, "serve never became ready"
            time.sleep(0.1)
        control = json.loads(ready.read_text())["controlUrl"]
        listed = httpx.get(f"{control}/v1/profiles", timeout=10).json()
        assert sorted(p["name"] for p in listed["profiles"]) == SHIPPED_PROFILES
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert list(installed.empty.iterdir()) == [], "serve wrote into the directory it ran in"


def test_cluster_and_a_shipped_scenario_by_name_from_the_wheel(installed: Installed, tmp_path: Path) -> None:
    """`cluster build` (the suite's cache, so a check, not a rebuild: kfp-burst's Go source comes from the package),
    `cluster up|down`, and `scenario run yunikorn-3355` found by name, with kube-scheduler."""
    r = installed.run("kube-fault-proxy", "cluster", "build", timeout=1800)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    state = tmp_path / "cluster"
    r = installed.run("kube-fault-proxy", "cluster", "--state-dir", str(state), "up", "--nodes", "2", timeout=300)
    try:
        assert r.returncode == 0, r.stderr[-3000:]
        r = installed.run("kube-fault-proxy", "cluster", "--state-dir", str(state), "status")
        assert r.returncode == 0 and "kube-apiserver" in r.stdout, r.stdout + r.stderr
    finally:
        down = installed.run("kube-fault-proxy", "cluster", "--state-dir", str(state), "down", timeout=120)
        assert down.returncode == 0, down.stderr
    out = tmp_path / "report"
    r = installed.run("kube-fault-proxy", "scenario", "run", "yunikorn-3355", "--scheduler", "kube-scheduler",
                      "--state-dir", str(tmp_path / "runs"), "-o", str(out), timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    runs = json.loads((out / "report.json").read_text())["runs"]
    assert [(run["scheduler"], run["check"]["verdict"], run["met"]) for run in runs] == [("kube-scheduler", "clean", True)]
    assert runs[0]["binds"]["failed"] > 0, "the shipped outage profile was found and struck"


def test_proxy_py_beside_it_takes_nothing_of_ours(installed: Installed, tmp_path: Path) -> None:
    """PyPI's proxy.py installs a top-level package `proxy`: our command, `python -m` and the plugin still work."""
    r = installed.run("python", "-m", "pip", "install", "-q", "--progress-bar", "off", "proxy.py", "pytest",
                      timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    r = installed.run("python", "-c", "import proxy, kube_fault_proxy; print(proxy.__file__)")
    assert r.returncode == 0 and "kube_fault_proxy" not in r.stdout, r.stdout + r.stderr
    for argv in (["kube-fault-proxy", "--help"], ["python", "-m", "kube_fault_proxy", "--help"]):
        r = installed.run(*argv)
        assert r.returncode == 0 and "kube-fault-proxy" in r.stdout, r.stderr
    (installed.empty / "test_uses_plugin.py").write_text(
        "def test_plugin_is_ours(pytestconfig):\n"
        "    plugin = pytestconfig.pluginmanager.get_plugin('kube_fault_proxy')\n"
        "    assert plugin is not None and plugin.__name__ == 'kube_fault_proxy.rig.pytest_plugin'\n"
        "    assert pytestconfig.getini('kube_fault_proxy_profiles') is not None\n")
    try:
        r = installed.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_uses_plugin.py")
    finally:
        (installed.empty / "test_uses_plugin.py").unlink()
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
