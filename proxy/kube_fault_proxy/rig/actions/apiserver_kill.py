"""The seed's own method as a scenario step: `kill -9` the real kube-apiserver, start it again later."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import httpx

from kube_fault_proxy.proxy.control.client import ControlClient, ControlError
from kube_fault_proxy.rig.cluster.apiserver import kill_apiserver, start_apiserver
from kube_fault_proxy.rig.cluster.record import Cluster


def _binds(control: str) -> dict[str, Any]:
    """The proxy's Binding counters right now (empty if it does not answer)."""
    with contextlib.suppress(httpx.HTTPError, ControlError, KeyError), ControlClient(control) as client:
        b = client.stats()["bindsTotal"]
        return {"bindsSucceeded": b["succeeded"], "bindsThrottled": b["throttled"], "bindsFailed": b["failed"]}
    return {}


def kill_and_restart(cluster: Cluster | None, control: str, restart_after: float, t0: float,
                     events: list[dict[str, Any]], stop: threading.Event) -> str:
    """Kill the apiserver, wait `restart_after` (less if the run ends: it must never stay down, nor
    come back after the cluster went), start it with the same flags, port, certificates and etcd and
    wait until it is ready. `apiserver-killed` (with the proxy's bind counters, read right after the kill)
    and `apiserver-restarted` go into the run's events."""
    if cluster is None:
        raise ValueError("killApiserver needs the local control plane (scenario run without --kubeconfig)")
    pid = kill_apiserver(cluster)
    killed, wall = time.monotonic(), time.time()
    # The proxy's counters are read after the kill, not before: in a wave its control plane (on the proxy's
    # own event loop) took 5-7 s to answer here, and the kill must land when its step is due. They count the
    # answers the apiserver wrote before it died, including those the proxy relayed after the kill
    # (`countersReadSeconds` after it; nothing is answered later until the restart).
    counters = _binds(control)
    events.append({"t": round(killed - t0, 2), "event": "apiserver-killed", "pid": pid, "time": wall, **counters,
                   "countersReadSeconds": round(time.monotonic() - killed, 2)})
    stop.wait(max(0.0, restart_after - (time.monotonic() - killed)))  # down restart_after, the read included
    ready = start_apiserver(cluster)
    new_pid = cluster.processes["kube-apiserver"].pid
    events.append({"t": round(time.monotonic() - t0, 2), "event": "apiserver-restarted", "pid": new_pid,
                   "time": time.time(), "readySeconds": round(ready, 2),
                   "downSeconds": round(time.monotonic() - killed, 2)})
    return (f"killed kube-apiserver (pid {pid}, kill -9); restarted it as pid {new_pid}, "
            f"ready {ready:.1f}s later, down {time.monotonic() - killed:.1f}s")
