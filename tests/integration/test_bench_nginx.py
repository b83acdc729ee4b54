"""The benchmarks' private nginx (bench/nginx.py), run for real: it serves, and it is gone afterwards."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from bench.nginx import Nginx, nginx_binary, private_nginx
from tests.support.processes import ROOT

BINDING = "/api/v1/namespaces/default/pods/p1/binding"


@pytest.fixture(autouse=True)
def nginx_present() -> None:
    # A missing nginx is a failure, not a skip: scripts/test unpacks Debian's and sets KFP_NGINX.
    assert nginx_binary(), "no nginx: run scripts/test, or set KFP_NGINX=$(scripts/fetch-nginx)"


def post_binding(nginx: Nginx, pki: Path) -> httpx.Response:
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    ctx.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
    with httpx.Client(http2=True, verify=ctx, timeout=10) as c:
        return c.post(nginx.url + BINDING, json={"kind": "Binding"})


def refused(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def gone(pid: int, timeout: float = 10.0) -> bool:
    """Whether the process exits within `timeout` (a zombie nobody has reaped yet counts as gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_serves_h2_tls_from_its_own_dir_and_is_gone_after(pki: Path) -> None:
    with private_nginx(pki) as nginx:
        r = post_binding(nginx, pki)
        assert (r.http_version, r.status_code, r.json()["status"]) == ("HTTP/2", 201, "Success")
        assert int((nginx.dir / "nginx.pid").read_text()) == nginx.proc.pid
        written = {p.name for p in nginx.dir.iterdir()}
        assert {"nginx.conf", "nginx.pid", "error.log", "client_body", "proxy"} <= written, written
        assert str(nginx.dir) in (nginx.dir / "nginx.conf").read_text()
    assert nginx.proc.returncode == 0  # SIGTERM: nginx's fast shutdown
    assert refused(nginx.port)
    assert not nginx.dir.exists()


def test_an_exception_in_the_block_still_stops_it(pki: Path) -> None:
    with pytest.raises(KeyboardInterrupt), private_nginx(pki) as nginx:
        raise KeyboardInterrupt  # as a Ctrl-C would
    assert nginx.proc.returncode is not None
    assert refused(nginx.port)
    assert not nginx.dir.exists()


def test_a_failed_start_says_why_and_leaves_nothing(pki: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where its private dir is made
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match="Address already in use"), private_nginx(pki, port=port):
            pass
    assert list(tmp_path.iterdir()) == []


def test_it_ends_when_its_starter_is_killed(pki: Path, tmp_path: Path) -> None:
    """kill -9 of the process that started it (no finally runs there): the kernel ends nginx too."""
    code = ("import sys, time; from pathlib import Path; from bench.nginx import private_nginx\n"
            "with private_nginx(Path(sys.argv[1])) as n:\n"
            "    print(n.proc.pid, n.port, flush=True); time.sleep(60)\n")
    starter = subprocess.Popen([sys.executable, "-c", code, str(pki)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "TMPDIR": str(tmp_path)})  # no finally there removes its dir
    try:
        assert starter.stdout is not None
        pid, port = map(int, starter.stdout.readline().split())
        assert not refused(port)
        starter.send_signal(signal.SIGKILL)
        starter.wait(10)
        assert gone(pid), f"nginx {pid} outlived its starter"
        assert refused(port)
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait()
