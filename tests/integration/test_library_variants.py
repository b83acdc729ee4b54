"""The wire tests on the library variants the package allows: mitmproxy as it ships (every change of
proxy/mitm/patches skipped) and the lowest allowed hyper-h2, hpack and hyperframe (each change applied only
where its verified source is installed). The highest allowed versions are the test venv's own (every other
test). Each variant runs the wire tests in a pytest of its own, against a proxy process started that way."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.processes import ROOT, Started, start_proxy

WIRE_TESTS = ["tests/integration/test_control_and_fidelity.py", "tests/integration/test_request_faults.py"]
# The lowest h2, hpack and hyperframe pyproject.toml allows (hyperframe: h2 4.3.0's own lower bound).
LOWEST = {"h2": "4.3.0", "hpack": "4.1.0", "hyperframe": "6.1.0"}


def run_wire_tests(env: dict[str, str], tmp_path: Path) -> tuple[int, int]:
    """The wire tests in a pytest of their own (its proxy started in `env`): (passed, failed)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *WIRE_TESTS],
                          cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=600)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    passed = re.search(r"(\d+) passed", summary)
    failed = re.search(r"(\d+) failed", summary)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    (tmp_path / "wire.log").write_text(done.stdout + done.stderr)
    return int(passed.group(1)) if passed else 0, int(failed.group(1)) if failed else 0


def info(started: Started) -> dict[str, object]:
    with httpx.Client(base_url=started.ready["controlUrl"], timeout=10) as c:
        got: dict[str, object] = c.get("/v1/info").json()
        return got


def test_stock_mitmproxy_skips_every_change_and_says_so(upstream: Started, pki: Path, tmp_path: Path) -> None:
    started = start_proxy(upstream.extra["url"], pki, tmp_path, "--stock-mitmproxy")
    try:
        changes = info(started)["libraryChanges"]
        assert isinstance(changes, list) and len(changes) >= 11
        assert {(c["applied"], c["reason"]) for c in changes} == {
            (False, "turned off (--stock-mitmproxy): mitmproxy as it ships")}
    finally:
        assert started.stop() == 0, started.log.read_text()


def test_the_wire_tests_pass_on_stock_mitmproxy(tmp_path: Path) -> None:
    passed, failed = run_wire_tests({"KFP_STOCK_MITMPROXY": "1"}, tmp_path)
    assert (failed, passed >= 30) == (0, True), (tmp_path / "wire.log").read_text()[-4000:]


@pytest.fixture(scope="module")
def lowest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The lowest allowed h2, hpack and hyperframe, in a directory put first on PYTHONPATH (pip from PyPI)."""
    target = tmp_path_factory.mktemp("lowest-h2")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                    *(f"{name}=={version}" for name, version in LOWEST.items())], check=True, timeout=300)
    return target


def test_the_wire_tests_pass_on_the_lowest_allowed_h2_hpack_and_hyperframe(
        lowest: Path, upstream: Started, pki: Path, tmp_path: Path) -> None:
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(lowest), os.environ.get("PYTHONPATH")]))}
    seen = subprocess.run([sys.executable, "-c", "import json, importlib.metadata as m; print(json.dumps("
                           "{n: m.version(n) for n in ('h2', 'hpack', 'hyperframe')}))"],
                          env={**os.environ, **env}, capture_output=True, text=True, check=True)
    assert json.loads(seen.stdout) == LOWEST
    started = start_proxy(upstream.extra["url"], pki, tmp_path, env=env)
    try:
        changes = {c["name"]: c for c in info(started)["libraryChanges"]}  # type: ignore[union-attr]
    finally:
        assert started.stop() == 0, started.log.read_text()
    # mitmproxy's own changes stay applied; each h2/hpack one is applied or skipped with the function that differs
    assert changes["inline_hooks"]["applied"] and changes["dispatch"]["applied"]
    for change in changes.values():
        assert change["applied"] or "is not the source it was verified against" in change["reason"], change
    print({name: c["applied"] for name, c in changes.items()})
    passed, failed = run_wire_tests(env, tmp_path)
    assert (failed, passed >= 30) == (0, True), (tmp_path / "wire.log").read_text()[-4000:]
