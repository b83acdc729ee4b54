"""Where kube-fault-proxy keeps state on disk (CA, journal; KFP_STATE_DIR overrides), and privately."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO


def state_dir() -> Path:
    """$KFP_STATE_DIR, else ~/.local/state/kube-fault-proxy."""
    env = os.environ.get("KFP_STATE_DIR")
    return Path(env) if env else Path.home() / ".local" / "state" / "kube-fault-proxy"


def ca_dir() -> Path:
    """mitmproxy's confdir: the CA the proxy signs its serving certificates with."""
    return state_dir() / "ca"


def default_journal() -> Path:
    """The journal file when --journal is not given."""
    return state_dir() / "journal.jsonl"


def private_dir(path: Path) -> Path:
    """A directory only its owner can enter (0700), made if needed."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path


def _narrow(fd: int) -> None:
    """Make an open regular file 0600 (a device such as /dev/null is left as it is)."""
    if stat.S_ISREG(os.fstat(fd).st_mode):
        os.fchmod(fd, 0o600)


def write_private(path: Path, data: bytes | str) -> Path:
    """Write a file that is 0600 from its first byte, whole or not at all: the bytes go to a temporary file
    beside it, which then replaces it in one rename, so an interruption (Ctrl-C during a search's state save)
    leaves the old file, never an empty one."""
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            _narrow(f.fileno())
            f.write(raw)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def append_private(path: Path) -> IO[str]:
    """Open a text file for appending, 0600 from its first byte (an existing file is narrowed too)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        _narrow(fd)
    except OSError:
        os.close(fd)
        raise
    return os.fdopen(fd, "a", encoding="utf-8")
