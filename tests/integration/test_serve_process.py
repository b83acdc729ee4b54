"""The serve command as a process: upstream restarts, bad input, tokens, shutdown."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.support.processes import ROOT, start_fake_apiserver, start_proxy, stop_or_dump


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
    return subprocess.run([sys.executable, "-m", "kube_fault_proxy", *args], cwd=cwd, capture_output=True,
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


HOSTILE_FILES = {
    "nul.yaml": ("apiVersion: kube-fault-proxy/v1\nkind: FaultProfile\nmetadata: {name: n}\nspec: {}\x00\n",
                 ":4:9: character U+0000 is not allowed in YAML"),
    "deep.yaml": ("spec: " + "[" * 100_000 + "]" * 100_000 + "\n", ":1:"),
    "deep-map.yaml": ("spec: " + "{a: " * 600 + "1" + "}" * 600 + "\n", ":1:131: refused: nested more than 32 levels deep"),
    "bigint.yaml": ("apiVersion: kube-fault-proxy/v1\nkind: FaultProfile\nmetadata: {name: b}\nspec: {seed: "
                    + "9" * 4301 + "}\n", ":4:14: spec.seed: integer longer than 64 digits"),
    "bomb.yaml": ("a0: &a0 lol\n" + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10))
                  + "spec: *a9\n", ":2:50: refused: more than 8 aliases"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_FILES))
def test_profiles_validate_refuses_hostile_files_in_one_line(tmp_path: Path, name: str) -> None:
    text, expected = HOSTILE_FILES[name]
    path = tmp_path / name
    path.write_text(text)
    r = run_cli("profiles", "validate", str(path))
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    [line] = r.stderr.splitlines()
    assert line.startswith(f"{path}{expected}"), line


def test_profiles_validate_caps_the_problems_it_lists(tmp_path: Path) -> None:
    path = tmp_path / "wide.yaml"
    keys = "\n".join(f"  k{i}: 1" for i in range(5000))
    path.write_text(f"apiVersion: kube-fault-proxy/v1\nkind: FaultProfile\nmetadata: {{name: w}}\nspec:\n{keys}\n")
    r = run_cli("profiles", "validate", str(path))
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and len(lines) == 21
    assert lines[0] == f"{path}:5:3: spec.k0: unknown field" and lines[-1] == f"{path}: … and 4980 more problems"


def test_verbose_log_holds_no_bearer_token(pki: Path, tmp_path: Path) -> None:
    """-v logs every proxy event; hpack would log every header, Authorization included."""
    client_token, control_token = f"client-{uuid.uuid4().hex}", f"control-{uuid.uuid4().hex}"
    up = start_fake_apiserver(pki, tmp_path / "up")
    proxy = start_proxy(f"https://127.0.0.1:{up.ready['port']}", pki, tmp_path / "proxy", "-v",
                        env={"KFP_CONTROL_TOKEN": control_token})
    try:
        for http2 in (True, False):
            with httpx.Client(http2=http2, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"],
                              headers={"Authorization": f"Bearer {client_token}"}) as c:
                assert c.get("/whoami").json()["authorization"] == f"Bearer {client_token}"  # passed through
                assert c.get("/api/v1/namespaces/default/pods").status_code == 200
        with httpx.Client(base_url=proxy.ready["controlUrl"],
                          headers={"Authorization": f"bearer {control_token}"}) as control:
            assert control.get("/v1/stats").status_code == 200
            assert control.get("/v1/active", headers={"Authorization": "Bearer wrong"}).status_code == 401
    finally:
        assert proxy.stop() == 0
        up.stop()
    log = proxy.log.read_text()
    # verbose indeed: mitmproxy logs each proxied connection's close at DEBUG, before the proxy stops
    # (a count of all DEBUG lines was not: how many shutdown lines reach the file before exit varies)
    assert log.count(" DEBUG mitmproxy.proxy.server: closing transports") >= 2, log
    assert client_token not in log and control_token not in log
    assert client_token[7:20] not in log  # not even a part of it


def test_kill_9_leaves_no_private_key_on_disk(pki: Path, tmp_path: Path) -> None:
    """The upstream client key is handed to mitmproxy as a path that lives in memory only."""
    up = start_fake_apiserver(pki, tmp_path / "up")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    proxy = start_proxy(f"https://127.0.0.1:{up.ready['port']}", pki, tmp_path / "proxy",
                        env={"TMPDIR": str(scratch)})
    try:
        with httpx.Client(http2=True, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"]) as c:
            assert c.get("/healthz").status_code == 200  # the upstream requires the client cert: key in use
        proxy.proc.kill()
        proxy.proc.wait(10)
    finally:
        up.stop()
    secret = (pki / "client.key").read_text().splitlines()[1].encode()  # a line of the key's base64
    holders = [p for p in tmp_path.rglob("*") if p.is_file() and p.parent != pki and secret in p.read_bytes()]
    assert holders == []
    assert list(scratch.iterdir()) == []


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    except (OSError, IndexError):
        return None


def running(pid: int) -> bool:
    """Whether pid exists and is not a zombie."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def children(pid: int) -> list[int]:
    """Live child processes of pid."""
    kids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    return [k for k in kids if (f := _stat(k)) is not None and int(f[1]) == pid and f[0] != "Z"]


def test_the_parsing_process_ends_with_serve_even_on_kill_9(pki: Path, tmp_path: Path) -> None:
    up = start_fake_apiserver(pki, tmp_path / "up")
    try:
        for stop in ("sigterm", "sigkill"):
            proxy = start_proxy(f"https://127.0.0.1:{up.ready['port']}", pki, tmp_path / stop)
            r = httpx.put(f"{proxy.ready['controlUrl']}/v1/profiles/x", content="a: 1\n", timeout=30)
            assert r.status_code == 422
            kids = children(proxy.proc.pid)
            assert kids, "uploads are parsed in a child process"
            if stop == "sigterm":
                assert proxy.stop() == 0
            else:
                proxy.proc.kill()
                proxy.proc.wait(10)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(running(k) for k in kids):
                time.sleep(0.2)
            assert [k for k in kids if running(k)] == [], stop
    finally:
        up.stop()


def test_sigterm_as_soon_as_it_is_ready_stops_serve_cleanly(pki: Path, tmp_path: Path) -> None:
    """A SIGTERM that comes the moment the ready file appears (a test session ending right after its last test)
    lands while serve still finishes its startup (it freezes the startup heap after writing the file): serve must
    take it as its signal to stop, exit 0 and say so, not die of the signal's default action (exit -15, as a CI
    rehearsal on 2026-12-06 saw at the teardown of the integration tests' session proxy)."""
    up = start_fake_apiserver(pki, tmp_path / "up")
    try:
        for attempt in range(3):
            proxy = start_proxy(f"https://127.0.0.1:{up.ready['port']}", pki, tmp_path / f"proxy{attempt}")
            code = stop_or_dump(proxy.proc)
            log = proxy.log.read_text()
            assert code == 0, f"attempt {attempt}: serve exited with {code}\n{log}"
            assert "kube-fault-proxy: shutting down" in log, log
    finally:
        up.stop()
