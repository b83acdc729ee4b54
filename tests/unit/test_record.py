"""The record of a local control plane (record.py): a private state file, typed and read back with its keys;
a process started or stopped under a signal stays named for `down`."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from kube_fault_proxy.rig.cluster.control_plane import down
from kube_fault_proxy.rig.cluster.processes import group_alive, signals_held
from kube_fault_proxy.rig.cluster.record import Cluster, ClusterError
from kube_fault_proxy.rig.cluster.schedulers import stop_scheduler
from kube_fault_proxy.rig.cluster.state import ClusterState, ProxyRecord


def test_cluster_state_with_tokens_is_private(tmp_path: Path) -> None:
    state = tmp_path / "cluster"
    c = Cluster(state)
    c.state = ClusterState(tokens={"admin": "secret"})
    c.save()
    assert (state / "cluster.json").stat().st_mode & 0o777 == 0o600
    assert state.stat().st_mode & 0o777 == 0o700
    (state / "cluster.json").chmod(0o644)  # a file an older version wrote is narrowed on the next save
    c.save()
    assert (state / "cluster.json").stat().st_mode & 0o777 == 0o600


# --- a signal between two halves of a step: what the state says stays true (the search's Ctrl-C)


class _Stop(BaseException):
    """What the search's SIGINT handler raises (a BaseException, like `Interrupted`)."""


def _raising(_signum: int, _frame: object) -> None:
    raise _Stop


def test_a_signal_while_a_process_starts_waits_until_it_is_recorded(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "cluster")
    before = signal.signal(signal.SIGINT, _raising)
    try:
        with pytest.raises(_Stop):
            with signals_held():
                # from another thread, as a search trial has (the kernel may hand it to any thread)
                sender = threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGINT))
                sender.start()
                sender.join()
                time.sleep(0.1)  # held: the handler has not run
                pid = c.start("kube-scheduler", ["sleep", "60"], tmp_path / "kube-scheduler.log")
            time.sleep(5)  # never reached: the held signal's handler runs as the block ends
        assert Cluster(c.dir).state.processes["kube-scheduler"].pid == pid
    finally:
        signal.signal(signal.SIGINT, before)
        assert down(c.dir, grace=2).names == ["kube-scheduler"]
    assert not group_alive(pid)


def test_a_signal_during_a_stop_leaves_the_process_recorded_for_down(tmp_path: Path) -> None:
    """`forget` (a scheduler's restart, a regate) drops a process from the state only once it is gone: before,
    a signal in its 5 s grace left a live scheduler that the state in hand no longer named (a search's record of
    its processes lost it, CI's failure of the interrupted-search test)."""
    c = Cluster(tmp_path / "cluster")
    c.state = ClusterState(scheduler="kube-scheduler", scheduler_binary="/nonexistent/kube-scheduler")
    pid = c.start("kube-scheduler", ["bash", "-c", "trap '' TERM; sleep 60 & wait"], tmp_path / "s.log")
    time.sleep(0.3)  # the trap is set
    before = signal.signal(signal.SIGINT, _raising)
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    try:
        timer.start()
        with pytest.raises(_Stop):
            stop_scheduler(c)  # as a trial's restart does; it ignores SIGTERM: the signal lands in the grace
    finally:
        signal.signal(signal.SIGINT, before)
    # Still named, in the state in hand (what the search records its pids from) and in the file (what down reads).
    assert group_alive(pid) and c.processes["kube-scheduler"].pid == pid
    assert Cluster(c.dir).state.processes["kube-scheduler"].pid == pid
    assert down(c.dir, grace=1).killed == ["kube-scheduler"] and not group_alive(pid)
    # Not interrupted: stopped, then forgotten.
    pid = c.start("kube-scheduler", ["sleep", "60"], tmp_path / "s.log")
    assert c.forget("kube-scheduler") == pid and not group_alive(pid)
    assert "kube-scheduler" not in Cluster(c.dir).state.processes and c.forget("kube-scheduler") is None


# --- the state file as a typed record


def test_the_state_file_keeps_its_keys_and_reads_back_typed(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "cluster")
    assert c.state == ClusterState() and c.processes == {} and not c.file.exists()
    c.state = ClusterState(scheduler="yunikorn", nodes=3, apiserver_argv=["kube-apiserver", "--v=1"],
                           through_proxy=["yunikorn"], tokens={"admin": "t"})
    c.state.proxy = ProxyRecord(url="https://127.0.0.1:1", control="http://127.0.0.1:2", ca_file="/ca.pem")
    c.record("etcd", 42, tmp_path / "etcd.log")
    doc = json.loads(c.file.read_text())
    # camelCase keys as before (a `jq` over the file or `cluster status` reads the same); unset fields left out
    assert doc["apiserverArgv"] == ["kube-apiserver", "--v=1"] and doc["proxy"]["caFile"] == "/ca.pem"
    assert doc["processes"] == {"etcd": {"pid": 42, "log": str(tmp_path / "etcd.log")}}
    assert "realNode" not in doc and "yunikorn" not in doc
    again = Cluster(c.dir)
    assert again.state == c.state and again.processes["etcd"].pid == 42 and again.via_proxy("yunikorn")
    assert again.proxy is not None and again.proxy.ca_file == Path("/ca.pem")
    assert not again.via_proxy("kube-controller-manager")


def test_a_state_file_from_another_version_still_lets_down_find_its_processes(tmp_path: Path) -> None:
    d = tmp_path / "cluster"
    d.mkdir()
    (d / "cluster.json").write_text(json.dumps({"processes": {"etcd": {"pid": 7, "log": "x", "cpu": 1}},
                                                "aKeyOfANewerVersion": {"x": 1}}))
    assert Cluster(d).processes["etcd"].pid == 7  # unknown keys are ignored, not refused


def test_a_state_file_that_is_not_a_clusters_names_the_file_and_the_field(tmp_path: Path) -> None:
    d = tmp_path / "cluster"
    d.mkdir()
    (d / "cluster.json").write_text(json.dumps({"processes": {"etcd": {"pid": "seven", "log": "x"}}}))
    with pytest.raises(ClusterError, match=r"cluster\.json: processes\.etcd\.pid: Input should be a valid integer"):
        Cluster(d)
