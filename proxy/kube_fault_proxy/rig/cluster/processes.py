"""Daemons the harness starts: each in its own session, logging to a file, stopped by group."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


PORT_TAKEN = "address already in use"


def log_size(log: Path) -> int:
    """The log's size now: where what a process writes from now on starts."""
    try:
        return log.stat().st_size
    except FileNotFoundError:
        return 0


def said_since(log: Path, offset: int, text: str) -> bool:
    """Whether the log, from byte `offset` on, contains `text`."""
    try:
        with log.open("rb") as f:
            f.seek(offset)
            return text.encode() in f.read()
    except FileNotFoundError:
        return False


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts connections on host:port."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block ends (not lost): a step that starts a process and records its
    pid, or stops one and forgets it, is never cut in two by Ctrl-C; each signal that came meanwhile is raised
    again as the block ends, for the handler that was there before.

    Done with Python handlers, not a signal mask: a mask holds a signal for one thread only, and the kernel
    hands a process's signal to any thread that does not block it (a search trial runs threads), while Python
    runs every handler in the main thread. In another thread it holds nothing: no handler runs there."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    saved = {sig: signal.signal(sig, lambda signum, _frame: came.append(signum)) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        for signum in came:
            signal.raise_signal(signum)


def spawn(argv: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> int:
    """Start a daemon in a new session (so it and its children stop together); returns its pid."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd, start_new_session=True)
    return proc.pid


def alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


@dataclass
class Stopped:
    """What stopping a set of process groups did, by name."""

    terminated: list[str] = field(default_factory=list)  # gone after SIGTERM
    killed: list[str] = field(default_factory=list)  # needed SIGKILL
    survivors: list[str] = field(default_factory=list)  # still there after SIGKILL (should never happen)

    @property
    def names(self) -> list[str]:
        """Every group that was running and is gone now."""
        return [*self.terminated, *self.killed]


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pgid, sig)


def _reap(pids: list[int]) -> None:
    """Collect our own exited children (an in-process `up` is their parent), so none stays a zombie."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def _wait_gone(groups: dict[str, int], timeout: float) -> set[str]:
    """Wait until no process of any group runs, or timeout; the names of the groups still running."""
    deadline = time.monotonic() + timeout
    while True:
        _reap(list(groups.values()))
        running = live_groups(set(groups.values()))
        left = {name for name, pgid in groups.items() if pgid in running}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def stop_groups(groups: dict[str, int], grace: float = 10.0, kill_wait: float = 5.0) -> Stopped:
    """SIGTERM every group at once, SIGKILL what is left after `grace`, and wait `kill_wait` more.

    A group is stopped when none of its processes runs any more, the leader or any child."""
    running = live_groups(set(groups.values()))
    groups = {name: pgid for name, pgid in groups.items() if pgid in running}
    for pgid in groups.values():
        _signal_group(pgid, signal.SIGTERM)
    stubborn = _wait_gone(groups, grace)
    for name in stubborn:
        _signal_group(groups[name], signal.SIGKILL)
    survivors = _wait_gone({n: groups[n] for n in stubborn}, kill_wait) if stubborn else set()
    return Stopped(terminated=[n for n in groups if n not in stubborn],
                   killed=[n for n in groups if n in stubborn and n not in survivors],
                   survivors=[n for n in groups if n in survivors])


def kill_group(pgid: int, timeout: float = 5.0) -> bool:
    """SIGKILL the group at once (no SIGTERM first: `kill -9`) and wait until it is gone; whether it is."""
    _signal_group(pgid, signal.SIGKILL)
    return not _wait_gone({str(pgid): pgid}, timeout)


def wait_exit(pid: int, timeout: float, poll: float = 0.02) -> tuple[float | None, int | None]:
    """Wait up to `timeout` for one process to exit: (the seconds it took, None if it still runs; its exit code,
    where this process is its parent and so reaps it, else None). The code is `os.waitstatus_to_exitcode`'s:
    negative when a signal ended it (-9: SIGKILL). An exit is seen within `poll` seconds."""
    t0 = time.monotonic()
    while True:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                return time.monotonic() - t0, os.waitstatus_to_exitcode(status)
        except ChildProcessError:  # not ours (or already reaped): whether it still runs is all there is to see
            if not alive(pid):
                return time.monotonic() - t0, None
        if time.monotonic() - t0 >= timeout:
            return None, None
        time.sleep(poll)


def stop(pid: int, timeout: float = 15.0) -> None:
    """SIGTERM the process group, then SIGKILL what is left after timeout."""
    stop_groups({str(pid): pid}, timeout, timeout)


def live_groups(pgids: set[int]) -> set[int]:
    """Which of these process groups still have a running (non-zombie) process: one scan of /proc."""
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().split(") ", 1)[1].split()
            except (FileNotFoundError, IndexError, ProcessLookupError):
                continue
            if fields[0] != "Z" and int(fields[2]) in pgids:
                found.add(int(fields[2]))
    return found


def group_alive(pgid: int) -> bool:
    """Whether any process of the group is still running."""
    return pgid in live_groups({pgid})
