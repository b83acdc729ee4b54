"""The serve command as a process: upstream restarts, bad input, tokens, shutdown."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.processes import ROOT, start_fake_apiserver, start_proxy


def test_upstream_restart_does_not_leave_sticky_502s(pki: Path, tmp_path: Path) -> None:
    """After the apiserver comes back, the same HTTP/2 client recovers (no 502 forever)."""
    up = start_fake_apiserver(pki, tmp_path / "up")
    port = up.ready["port"]
    proxy = start_proxy(f"https://127.0.0.1:{port}", pki, tmp_path / "proxy")
    try:
        with httpx.Client(http2=True, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"],
                          timeout=5) as c:
            assert c.get("/healthz").status_code == 200
            up.stop()
            down = []
            for _ in range(3):
                try:
                    down.append(c.get("/healthz").status_code)
                except httpx.HTTPError as e:
                    down.append(type(e).__name__)
            assert 200 not in down
            up = start_fake_apiserver(pki, tmp_path / "up", port=port)
            after = []
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                try:
                    after.append(c.get("/healthz").status_code)
                except httpx.HTTPError as e:
                    after.append(type(e).__name__)
                if after[-3:] == [200, 200, 200]:
                    break
                time.sleep(0.1)
            assert after[-3:] == [200, 200, 200], after
            assert 502 not in after, after
        with httpx.Client(base_url=proxy.ready["controlUrl"]) as control:
            assert control.get("/v1/stats").json()["events"].get("upstream-lost", 0) >= 1
    finally:
        assert proxy.stop() == 0
        up.stop()


def run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60)


def test_bad_profile_dir_exits_2_naming_the_problem(tmp_path: Path) -> None:
    (tmp_path / "x.yaml").write_text("apiVersion: kube-fault-proxy/v1\nkind: FaultProfile\n"
                                     "metadata: {name: x}\nspec: {seed: nope}\n")
    r = run_cli("serve", "--upstream", "https://127.0.0.1:1", "--profiles", str(tmp_path))
    assert r.returncode == 2
    assert f"{tmp_path}/x.yaml:4:14: spec.seed: Input should be a valid integer" in r.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--upstream", "http://127.0.0.1:1"], "the apiserver URL must be https://"),
        (["--upstream", "https://127.0.0.1:1", "--control", "0.0.0.0:0"],
         "reachable from the network: set --control-token"),
        (["--upstream", "https://127.0.0.1:1", "--listen", "nope"], "--listen: expected HOST:PORT"),
        ([], "an upstream is needed"),
        (["--kubeconfig", "/nonexistent/config"], "cannot read kubeconfig"),
        (["--upstream", "https://127.0.0.1:1", "--client-cert", "/nonexistent"], "no such file"),
        (["--upstream", "https://127.0.0.1:1", "--profile", "nope", "--listen", "127.0.0.1:0",
          "--control", "127.0.0.1:0"], "no profile named 'nope'"),
    ],
    ids=["http-upstream", "open-control-without-token", "bad-listen", "no-upstream",
         "missing-kubeconfig", "missing-cert", "unknown-profile"],
)
def test_usage_errors_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    r = run_cli("serve", "--journal", str(tmp_path / "j.jsonl"), *args)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr


def test_profiles_validate_exit_codes(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: kube-fault-proxy/v1\nkind: FaultProfile\nmetadata: {name: b}\n"
                   "spec:\n  rules:\n    - {name: r, fault: {reset: {}}, probability: 3}\n")
    ok = run_cli("profiles", "validate", *map(str, sorted((ROOT / "fault_profiles").glob("*.yaml"))))
    assert ok.returncode == 0 and ok.stdout.count(": ok (") >= 7
    r = run_cli("profiles", "validate", str(bad))
    assert r.returncode == 2
    assert r.stderr.strip() == f"{bad}:6:50: spec.rules[0].probability: Input should be less than or equal to 1"


def test_token_protected_control_plane_and_ctl(pki: Path, tmp_path: Path) -> None:
    up = start_fake_apiserver(pki, tmp_path / "up")
    proxy = start_proxy(f"https://127.0.0.1:{up.ready['port']}", pki, tmp_path / "proxy",
                        "--control-token", "t0ken", "--profile", "bind-fail-30pct", "--seed", "3")
    try:
        url = proxy.ready["controlUrl"]
        assert httpx.get(f"{url}/v1/active").status_code == 401
        r = run_cli("ctl", "--control", url, "--token", "t0ken", "status")
        assert r.returncode == 0 and '"profile": "bind-fail-30pct"' in r.stdout and '"seed": 3' in r.stdout
        r = run_cli("ctl", "--control", url, "--token", "t0ken", "activate", "bind-slow", "--ttl", "1m")
        assert r.returncode == 0 and "active: bind-slow (epoch 2" in r.stdout and "reverts in 60s" in r.stdout
        r = run_cli("ctl", "--control", url, "--token", "t0ken", "activate", "nope")
        assert r.returncode == 2 and "404" in r.stderr
        assert run_cli("ctl", "--control", url, "status").returncode == 1  # no token: refused
        r = run_cli("ctl", "--control", url, "--token", "t0ken", "deactivate")
        assert r.returncode == 0 and "was: bind-slow" in r.stdout
    finally:
        assert proxy.stop() == 0
        up.stop()
    assert "shutting down" in proxy.log.read_text()


def test_ctl_reports_an_unreachable_control_plane() -> None:
    r = run_cli("ctl", "--control", "http://127.0.0.1:1", "status")
    assert r.returncode == 1 and "cannot reach the control plane" in r.stderr
