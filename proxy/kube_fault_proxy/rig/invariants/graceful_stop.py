"""`graceful-stop-within-bound`: every graceful stop of the scheduler (a scenario's stopScheduler step) ended in
its exit within the step's bound, `within` seconds after the signal.

Judged from a run's own events, not from the cluster: each `scheduler-stopped` event carries the bound and
`exitSeconds`, or `stopTimedOut: true` when the scheduler still ran at the bound and the rig killed it. A step
that left no such event (it failed, or its trigger never came) cannot be judged, and says so: a scenario that
asks for a stop and never made one has not tested it.

The promise, and why the bound is never stronger than it. YuniKorn's shim exits on SIGTERM or SIGINT by
`ss.Stop()` then `os.Exit(0)` (pkg/cmd/shim/main.go in v1.9.0); `Stop` waits at most 5 s for its dispatcher
(pkg/dispatcher/dispatcher.go:278, "dispatcher did not stop in time"). A bound under 5 s would ask more than that,
so the step's schema refuses one. kube-scheduler states no bound of its own; what a scheduler run as a pod is
given is the pod's terminationGracePeriodSeconds, 30 s by default, before the kubelet kills it
(k8s.io/api v0.37.2 core/v1/types.go, PodSpec.TerminationGracePeriodSeconds). So a kube-scheduler stop's bound
must be at least 30 s (`check_bounds`, when the run starts). Pure: events in, violations out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kube_fault_proxy.rig.invariants.catalogue import Violation

NAME = "graceful-stop-within-bound"
EVENT = "scheduler-stopped"
# The least bound a stop may be judged by, per scheduler: what its cited promise allows (see above).
PROMISED_SECONDS = {"yunikorn": 5.0, "kube-scheduler": 30.0}


def check_bounds(bounds: Iterable[float], scheduler: str) -> None:
    """ValueError if a stop's bound is under what the scheduler's cited promise allows it."""
    least = PROMISED_SECONDS.get(scheduler)
    low = sorted(b for b in bounds if least is not None and b < least)
    if low:
        why = ("YuniKorn's shim alone may wait 5 s for its dispatcher" if scheduler == "yunikorn" else
               "its only cited promise is a pod's default terminationGracePeriodSeconds, 30 s")
        raise ValueError(f"stopScheduler within {low[0]:g}s is stronger than {scheduler} promises ({why}): "
                         f"give {scheduler} at least {least:g}s")


def judge_stops(events: Iterable[Mapping[str, Any]], steps: int) -> list[Violation]:
    """Each stop whose exit came later than its bound or never came (killed at the bound), and, if the run's
    events hold fewer stops than the scenario's `steps` stopScheduler steps, one for the stops never made."""
    out = []
    stops = [e for e in events if e.get("event") == EVENT]
    for e in stops:
        who = f"{e.get('scheduler', 'the scheduler')} (pid {e.get('pid', '?')})"
        within = float(e["within"])
        sig = f"SIG{e.get('signal', 'TERM')}"
        if e.get("stopTimedOut"):
            out.append(Violation(NAME, f"{who} still ran {within:g}s after {sig} at {e['t']}s and was killed",
                                 (who,), "timed-out", numbers={"within": within}))
        elif float(e["exitSeconds"]) > within:
            out.append(Violation(NAME, f"{who} exited {float(e['exitSeconds']):.2f}s after {sig} at {e['t']}s "
                                       f"(bound {within:g}s)", (who,), "late",
                                 numbers={"within": within, "exitSeconds": float(e["exitSeconds"])}))
    if len(stops) < steps:
        out.append(Violation(NAME, f"{steps} stopScheduler steps, {len(stops)} stops made: a stop not made cannot "
                                   "be judged (see the run's steps)", (), "not-made",
                             numbers={"steps": steps, "stops": len(stops)}))
    return out
