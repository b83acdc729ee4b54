"""The stand-in apiserver stops on Ctrl-C whichever of its threads the signal lands on (the quick start's last
step: its test once saw the stand-in still up 15 s after the SIGINT, in the rehearsal of 6764b0b)."""

from __future__ import annotations

import ctypes
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

# tgkill(tgid, tid, sig), a signal to one thread of a process: its syscall number per architecture
SYS_TGKILL = {"x86_64": 234, "aarch64": 131}[platform.machine()]


def test_a_sigint_that_lands_on_the_serving_thread_stops_the_stand_in(tmp_path: Path) -> None:
    """The kernel gives a process's signal to any of its threads. When SIGINT lands on the serving thread, Python
    raises KeyboardInterrupt on the main thread only when that thread next runs, and a main thread blocked in a
    wait with no timeout never did. tgkill sends it to the serving thread on purpose. And it is started with SIGINT
    ignored, as a non-interactive shell starts a background job: Python then installs no KeyboardInterrupt, so the
    stand-in sets its own handler (both CI rehearsals of this stop ran the suite so)."""
    log = tmp_path / "stand-in.log"
    proc = subprocess.Popen([sys.executable, "-m", "kube_fault_proxy", "stand-in", "--listen", "127.0.0.1:0",
                             "--dir", str(tmp_path / "state"), "--kubeconfig", str(tmp_path / "kubeconfig")],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=tmp_path,
                            # as a shell's background job starts it (`cmd &`): SIGINT ignored, inherited through exec
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.monotonic() + 30
        while "kubeconfig:" not in log.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.1)
        others = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task") if int(t) != proc.pid]
        assert others, "the stand-in serves on a thread of its own"
        libc = ctypes.CDLL(None, use_errno=True)
        assert libc.syscall(SYS_TGKILL, proc.pid, others[0], signal.SIGINT) == 0, ctypes.get_errno()
        assert proc.wait(5) == 0, log.read_text(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
