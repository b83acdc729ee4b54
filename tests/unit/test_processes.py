"""Stopping the control plane's daemons by process group: SIGTERM, then SIGKILL, children included."""

from __future__ import annotations

import time
from pathlib import Path

from kube_fault_proxy.rig.cluster.processes import group_alive, live_groups, spawn, stop_groups

# A leader that ignores SIGTERM, with a child that ignores it too: only SIGKILL of the group ends both.
STUBBORN = "trap '' TERM; (trap '' TERM; sleep 60) & sleep 60; wait"
POLITE = "sleep 60"


def _started(tmp_path: Path, name: str, script: str) -> int:
    pid = spawn(["bash", "-c", script], tmp_path / f"{name}.log")
    deadline = time.monotonic() + 5
    while not group_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # the traps are set
    return pid


def test_a_polite_group_goes_on_sigterm_a_stubborn_one_needs_sigkill(tmp_path: Path) -> None:
    groups = {"polite": _started(tmp_path, "polite", POLITE), "stubborn": _started(tmp_path, "stubborn", STUBBORN)}
    t0 = time.monotonic()
    stopped = stop_groups(groups, grace=1.0, kill_wait=5.0)
    assert (stopped.terminated, stopped.killed, stopped.survivors) == (["polite"], ["stubborn"], [])
    assert stopped.names == ["polite", "stubborn"]
    assert 1.0 <= time.monotonic() - t0 < 5.0  # bounded: the grace, then SIGKILL at once
    assert live_groups(set(groups.values())) == set()  # leaders and children


def test_a_second_stop_finds_nothing(tmp_path: Path) -> None:
    groups = {"polite": _started(tmp_path, "polite", POLITE)}
    assert stop_groups(groups, grace=5.0).names == ["polite"]
    again = stop_groups(groups, grace=5.0)
    assert (again.terminated, again.killed, again.survivors) == ([], [], [])


def test_a_group_whose_leader_is_gone_is_still_stopped(tmp_path: Path) -> None:
    # The leader exits at once, its child lives on in the group: the group still counts as running.
    pid = _started(tmp_path, "orphan", "(trap '' TERM; sleep 60) & exit 0")
    assert group_alive(pid)
    stopped = stop_groups({"orphan": pid}, grace=0.5)
    assert stopped.killed == ["orphan"] and not group_alive(pid)
