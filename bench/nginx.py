"""The benchmarks' own nginx: a TLS + HTTP/2 upstream answering every request with a 201 Status.

Everything it writes (config, pid file, error log, temp paths) is in a private temp dir; it listens on
127.0.0.1 at a free port, runs as our child in its own process group, and is stopped by its pid when
the `with` block ends, however it ends; if this process dies first (even by kill -9), the kernel sends
it SIGTERM. It never touches a system nginx or port 80. `KFP_NGINX` names the binary, else the PATH's.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CONFIG = """worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {dir}/client_body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  keepalive_requests 10000000;
  http2_max_concurrent_streams 4096;  # as the proxy advertises: a client-go burst dials neither
  server {{
    listen 127.0.0.1:{port} ssl http2;
    ssl_certificate {pki}/server.pem;
    ssl_certificate_key {pki}/server.key;
    ssl_client_certificate {pki}/ca.pem;
    ssl_verify_client optional;
    location / {{
      default_type application/json;
      return 201 '{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Success","code":201}}';
    }}
  }}
}}
"""
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Nginx:
    """A running private nginx: its master process, port and directory."""

    proc: subprocess.Popen[bytes]
    port: int
    dir: Path

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"


def nginx_binary() -> str | None:
    """The nginx to run: $KFP_NGINX (scripts/fetch-nginx prints one), else the PATH's."""
    return os.environ.get("KFP_NGINX") or shutil.which("nginx")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def private_nginx(pki: Path, port: int | None = None, timeout: float = 20.0) -> Iterator[Nginx]:
    """Start nginx with the certificates in `pki` (server.pem, server.key, ca.pem); stop it on exit."""
    binary = nginx_binary()
    if binary is None:
        raise FileNotFoundError("no nginx: set KFP_NGINX=$(scripts/fetch-nginx), or run bench/run or scripts/test")
    work = Path(tempfile.mkdtemp(prefix="kfp-nginx-"))
    work.chmod(0o711)  # started as root, its workers run as nobody and must reach the temp dirs it makes here
    port = port or free_port()
    (work / "nginx.conf").write_text(CONFIG.format(dir=work, port=port, pki=pki.resolve()))
    proc: subprocess.Popen[bytes] | None = None
    try:
        with (work / "stderr.log").open("wb") as out:
            proc = subprocess.Popen(
                [binary, "-p", f"{work}/", "-c", str(work / "nginx.conf"), "-e", str(work / "error.log"),
                 "-g", "daemon off;"],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_end_with_parent)
        _wait_listening(proc, port, work, timeout)
        yield Nginx(proc, port, work)
    finally:
        if proc is not None:
            _stop(proc)
        shutil.rmtree(work, ignore_errors=True)


def _end_with_parent() -> None:
    """In the child, before exec: SIGTERM (nginx's fast shutdown) when the process that started it dies."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _wait_listening(proc: subprocess.Popen[bytes], port: int, work: Path, timeout: float) -> None:
    """Until its pid file names it: nginx writes it only once its socket listens (else it exits)."""
    pid_file = work / "nginx.pid"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nginx exited with {proc.returncode}:\n{_logs(work)}")
        if pid_file.exists() and pid_file.read_text().strip() == str(proc.pid):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nginx not listening on 127.0.0.1:{port} after {timeout}s:\n{_logs(work)}")


def _logs(work: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in (work / "stderr.log", work / "error.log") if p.exists())


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the master (it stops its workers); SIGKILL its own process group if it does not exit."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group start_new_session made for it: it and its workers
        proc.wait(5)
