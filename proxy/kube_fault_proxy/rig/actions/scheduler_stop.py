"""A graceful stop: the scheduler under test is sent SIGTERM (or SIGINT), given a bound to exit, and started again.

A scenario does it as a step (`stopScheduler: {signal, within, restartAfter}`). The exit is timed from the signal;
a scheduler still running at the bound is SIGKILLed with its process group, so nothing is left. Its
`scheduler-stopped` event carries the bound (`within`), and `exitSeconds` or `stopTimedOut: true`; the invariant
`graceful-stop-within-bound` (rig/invariants/graceful_stop.py) judges the run's stops from those events."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kube_fault_proxy.rig.actions.scheduler_kill import restart_recorded
from kube_fault_proxy.rig.cluster.record import Cluster
from kube_fault_proxy.rig.cluster.schedulers import signal_scheduler


def stop_and_restart_scheduler(cluster: Cluster | None, sig: str, within: float, restart_after: float,
                               now: Callable[[], float], events: list[dict[str, Any]], stop: threading.Event,
                               seen: Mapping[str, Any] | None = None) -> str:
    """Signal the scheduler, wait up to `within` for its exit (SIGKILL past it), wait `restart_after` (less if the
    run ends: it must never stay down), start the same build again and wait until it is ready.
    `scheduler-stopped` (placed at the signal; with `seen`, what was counted just before it) and
    `scheduler-restarted` go into the run's events; returns what it did."""
    if cluster is None:
        raise ValueError("stopScheduler needs the local control plane (scenario run without --kubeconfig)")
    scheduler = cluster.scheduler
    t, wall, began = now(), time.time(), time.monotonic()
    done = signal_scheduler(cluster, sig, within)
    timed = {"stopTimedOut": True} if done.timed_out else {"exitSeconds": round(float(done.exit_seconds or 0), 3)}
    events.append({"t": round(t, 2), "event": "scheduler-stopped", "scheduler": scheduler, "pid": done.pid,
                   "signal": sig, "within": within, **timed, "exitCode": done.exit_code, "time": wall,
                   **dict(seen or {})})
    how = (f"still running {within:g}s after SIG{sig}, killed (kill -9)" if done.timed_out else
           f"exited {done.exit_seconds:.2f}s after SIG{sig} (bound {within:g}s), exit code {done.exit_code}")
    stop.wait(restart_after)
    new_pid, ready, down = restart_recorded(cluster, began, now, events)
    return (f"stopped {scheduler} (pid {done.pid}): {how}; restarted it as pid {new_pid}, "
            f"ready {ready:.1f}s later, down {down:.1f}s")
