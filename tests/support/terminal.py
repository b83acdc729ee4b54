"""Run a command under a pseudo-terminal (as a user's shell would) or with its stderr piped, timestamping lines."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.processes import ROOT


@dataclass
class Lines:
    """What a command wrote, line by line, each with the second (since start) it arrived."""

    code: int
    lines: list[tuple[float, str]]

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)


def in_pty(argv: list[str], timeout: float, cwd: Path = ROOT, columns: int = 120) -> tuple[int, str]:
    """Run with stdin, stdout and stderr on a pty; (exit code, everything it wrote, escape codes and all)."""
    controller, terminal = pty.openpty()
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "40", "TERM": "xterm-256color"}
    for var in ("CI", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):  # let rich see the pty
        env.pop(var, None)
    proc = subprocess.Popen(argv, cwd=cwd, stdin=terminal, stdout=terminal, stderr=terminal, env=env,
                            start_new_session=True)
    os.close(terminal)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.2)
            if ready:
                try:
                    data = os.read(controller, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(controller)
    return code, b"".join(chunks).decode(errors="replace")


def piped(argv: list[str], timeout: float, cwd: Path = ROOT) -> Lines:
    """Run with stderr piped (as in CI or a log file), stdout merged into it; each line timestamped."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env, text=True, bufsize=1)
    assert proc.stdout is not None
    lines: list[tuple[float, str]] = []
    try:
        for line in proc.stdout:
            lines.append((time.monotonic() - start, line.rstrip("\n")))
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"{argv} ran over {timeout}s")
        return Lines(proc.wait(timeout=10), lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
