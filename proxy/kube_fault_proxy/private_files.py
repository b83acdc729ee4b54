"""Secrets for libraries that only take a file path: a memfd (/proc/self/fd/N, gone with the process
even on kill -9), else 0600 files in a 0700 per-process directory that the next start cleans."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from types import TracebackType

from kube_fault_proxy import paths


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def clean_stale(root: Path) -> list[Path]:
    """Remove the per-process directories of processes that no longer run; returns them."""
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for entry in root.iterdir():
            if entry.is_dir() and entry.name.isdigit() and not _pid_alive(int(entry.name)):
                shutil.rmtree(entry, ignore_errors=True)
                removed.append(entry)
    return removed


class PrivateFiles:
    """Named secrets as paths that only this process can read, for as long as it runs."""

    def __init__(self, root: Path | None = None, in_memory: bool = True) -> None:
        self._root = root if root is not None else paths.state_dir() / "private"
        self._in_memory = in_memory and hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")
        self._fds: list[int] = []
        self._dir: Path | None = None

    @property
    def in_memory(self) -> bool:
        """Whether secrets live in memory (memfd) rather than in a private directory."""
        return self._in_memory

    def put(self, name: str, data: bytes) -> Path:
        """Keep data under name; returns a path the process can open until close()."""
        if self._in_memory:
            fd = os.memfd_create(name, os.MFD_CLOEXEC)
            self._fds.append(fd)
            os.fchmod(fd, 0o600)
            rest = memoryview(data)
            while rest:
                rest = rest[os.write(fd, rest):]
            return Path(f"/proc/self/fd/{fd}")
        if self._dir is None:
            paths.private_dir(self._root)
            clean_stale(self._root)
            self._dir = paths.private_dir(self._root / str(os.getpid()))
        return paths.write_private(self._dir / name, data)

    def close(self) -> None:
        """Forget every secret: close the memfds, or remove the directory."""
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> PrivateFiles:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
