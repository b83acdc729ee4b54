"""`cluster up|down|env`'s own code paths that need no cluster: readiness errors, private state, what env
exports, and the order down stops things in (shell processes standing in for the components)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import pytest
from kube_fault_proxy.rig.cluster.build import kubernetes
from kube_fault_proxy.rig.cluster.control_plane import (
    Cluster,
    ClusterError,
    _wait,
    down,
    env,
    needed_components,
    stop_scheduler,
)
from kube_fault_proxy.rig.cluster.processes import group_alive, signals_held, spawn
from kube_fault_proxy.rig.cluster.state import ClusterState, ProxyRecord


def test_a_readiness_timeout_names_the_last_error(tmp_path: Path) -> None:
    def refused() -> bool:
        raise httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
                                 "Missing Authority Key Identifier (_ssl.c:1000)")

    log = tmp_path / "kube-apiserver.log"
    log.write_text("serving securely on 127.0.0.1:6443\n")
    with pytest.raises(ClusterError) as e:
        _wait("kube-apiserver", refused, os.getpid(), log, timeout=0.3)
    assert str(e.value).startswith(
        "kube-apiserver not ready after 0s (last attempt: ConnectError: [SSL: CERTIFICATE_VERIFY_FAILED] "
        "certificate verify failed: Missing Authority Key Identifier (_ssl.c:1000)); see ")
    assert str(e.value).endswith("serving securely on 127.0.0.1:6443")


def test_a_not_ready_answer_is_named_too(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"last attempt: it answered, but not ready"):
        _wait("etcd", lambda: False, os.getpid(), tmp_path / "etcd.log", timeout=0.2)


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


def test_env_exports_kubectl_only_once_it_is_built(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KFP_CACHE_DIR", str(tmp_path / "cache"))
    c = Cluster(tmp_path / "cluster")
    c.state = ClusterState(kubeconfigs={"admin": str(tmp_path / "admin.kubeconfig")})
    c.save()
    assert env(c.dir).splitlines() == [f"export KUBECONFIG={tmp_path / 'admin.kubeconfig'}"]
    kubectl = kubernetes("kubectl").binary
    kubectl.parent.mkdir(parents=True)
    kubectl.write_bytes(b"")
    assert env(c.dir).splitlines()[1] == f"export KFP_KUBECTL={kubectl}"


def test_up_builds_what_it_starts_and_the_kubectl_env_advertises() -> None:
    assert needed_components("none") == ["etcd", "kube-apiserver", "kube-controller-manager", "kwok", "kubectl"]
    assert needed_components("yunikorn")[-1] == "yunikorn-scheduler"


def test_down_stops_the_clients_then_the_apiserver_then_etcd(tmp_path: Path) -> None:
    c = Cluster(tmp_path / "cluster")
    for name in ("etcd", "kube-apiserver", "kwok", "kube-scheduler"):
        log = tmp_path / f"{name}.log"
        # each logs when its SIGTERM arrives, so the order is on record
        c.record(name, spawn(["bash", "-c", f"trap 'date +%s.%N > {log}.term; exit 0' TERM; sleep 60 & wait"], log),
                 log)
    time.sleep(0.3)  # the traps are set
    stopped = down(c.dir, grace=5)
    assert stopped.terminated == ["kube-scheduler", "kwok", "kube-apiserver", "etcd"] and not stopped.killed
    at = {n: float((tmp_path / f"{n}.log.term").read_text()) for n in stopped.terminated}
    assert at["kube-scheduler"] < at["kube-apiserver"] < at["etcd"] and at["kwok"] < at["kube-apiserver"]
    assert Cluster(c.dir).state.processes == {}
    assert down(c.dir).names == []  # a second down finds nothing


def test_a_component_that_lost_its_port_is_started_again_on_another(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """kube-apiserver cannot bind port 0: a port picked a moment before can be taken by then, and the
    component exits saying so; it is started again on another port, once per loss, and the port it serves on
    is returned."""
    from kube_fault_proxy.rig.cluster import control_plane

    ports = iter([40001, 40002])
    monkeypatch.setattr(control_plane, "free_port", lambda: next(ports))
    log = tmp_path / "kube-apiserver.log"
    started: list[int] = []
    pids: list[int] = []

    def start(port: int) -> int:
        started.append(port)
        script = (f"echo 'failed to listen on 127.0.0.1:{port}: bind: address already in use'; exit 1"
                  if len(started) == 1 else "sleep 30")
        pids.append(spawn(["sh", "-c", script], log))
        return pids[-1]
    try:
        port = control_plane._on_a_free_port("kube-apiserver", start, lambda p: p == 40002, log, timeout=10)
    finally:
        for pid in pids[1:]:
            os.killpg(pid, 9)
    assert (port, started) == (40002, [40001, 40002])


def test_a_component_that_fails_for_another_reason_is_not_started_again(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from kube_fault_proxy.rig.cluster import control_plane

    monkeypatch.setattr(control_plane, "free_port", lambda: 40003)
    log = tmp_path / "kube-scheduler.log"
    started: list[int] = []

    def start(port: int) -> int:
        started.append(port)
        return spawn(["sh", "-c", "echo 'no such flag: --feature-gates'; exit 1"], log)
    with pytest.raises(ClusterError, match="kube-scheduler exited during startup") as e:
        control_plane._on_a_free_port("kube-scheduler", start, lambda p: False, log, timeout=10)
    assert started == [40003] and "no such flag" in str(e.value)


def test_etcd_names_the_port_it_took_in_its_log(tmp_path: Path) -> None:
    from kube_fault_proxy.rig.cluster.control_plane import _etcd_client_url

    log = tmp_path / "etcd.log"
    log.write_text('{"level":"info","msg":"serving peer traffic","address":"127.0.0.1:46713"}\n')
    assert _etcd_client_url(log) is None
    log.write_text(log.read_text() + '{"level":"info","caller":"embed/serve.go:222","msg":"serving client traffic '
                   'insecurely; this is strongly discouraged!","traffic":"grpc+http","address":"127.0.0.1:37365"}\n')
    assert _etcd_client_url(log) == "http://127.0.0.1:37365"


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
