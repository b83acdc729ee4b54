"""Secrets as paths: in memory on Linux, else private files that a crash does not leave behind."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from kube_fault_proxy.private_files import PrivateFiles, clean_stale


def test_in_memory_secrets_touch_no_disk(tmp_path: Path) -> None:
    with PrivateFiles(tmp_path / "private") as files:
        assert files.in_memory
        path = files.put("upstream-client.pem", b"KEY")
        assert str(path).startswith("/proc/self/fd/") and path.read_bytes() == b"KEY"
        assert not (tmp_path / "private").exists()
    assert not path.exists()


def test_private_directory_is_0700_files_0600_and_removed_on_close(tmp_path: Path) -> None:
    files = PrivateFiles(tmp_path / "private", in_memory=False)
    path = files.put("upstream-client.pem", b"KEY")
    assert path.parent == tmp_path / "private" / str(os.getpid())
    assert path.read_bytes() == b"KEY"
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700 and (tmp_path / "private").stat().st_mode & 0o777 == 0o700
    files.close()
    assert not path.parent.exists()


def test_the_next_start_cleans_what_a_crashed_process_left(tmp_path: Path) -> None:
    root = tmp_path / "private"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    left = root / dead.stdout.strip()
    left.mkdir(parents=True)
    (left / "upstream-client.pem").write_bytes(b"KEY")
    mine = root / str(os.getpid())
    mine.mkdir()
    assert clean_stale(root) == [left]
    assert not left.exists() and mine.exists()
    left.mkdir()
    with PrivateFiles(root, in_memory=False) as files:  # a start cleans too, at its first secret
        assert left.exists()
        files.put("x", b"y")
        assert not left.exists()
    assert not (root / str(os.getpid())).exists()


def test_memfds_are_not_inherited_by_children(tmp_path: Path) -> None:
    with PrivateFiles(tmp_path / "private") as files:
        fd = int(files.put("k", b"KEY").name)
        assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
