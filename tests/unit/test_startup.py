"""Waiting for a component to answer ready (startup.py): what a timeout names, and a port lost before the
component bound it (processes standing in for the components)."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from kube_fault_proxy.rig.cluster import startup
from kube_fault_proxy.rig.cluster.processes import spawn
from kube_fault_proxy.rig.cluster.record import ClusterError
from kube_fault_proxy.rig.cluster.startup import wait_ready


def test_a_readiness_timeout_names_the_last_error(tmp_path: Path) -> None:
    def refused() -> bool:
        raise httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
                                 "Missing Authority Key Identifier (_ssl.c:1000)")

    log = tmp_path / "kube-apiserver.log"
    log.write_text("serving securely on 127.0.0.1:6443\n")
    with pytest.raises(ClusterError) as e:
        wait_ready("kube-apiserver", refused, os.getpid(), log, timeout=0.3)
    assert str(e.value).startswith(
        "kube-apiserver not ready after 0s (last attempt: ConnectError: [SSL: CERTIFICATE_VERIFY_FAILED] "
        "certificate verify failed: Missing Authority Key Identifier (_ssl.c:1000)); see ")
    assert str(e.value).endswith("serving securely on 127.0.0.1:6443")


def test_a_not_ready_answer_is_named_too(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=r"last attempt: it answered, but not ready"):
        wait_ready("etcd", lambda: False, os.getpid(), tmp_path / "etcd.log", timeout=0.2)


def test_a_component_that_lost_its_port_is_started_again_on_another(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """kube-apiserver cannot bind port 0: a port picked a moment before can be taken by then, and the
    component exits saying so; it is started again on another port, once per loss, and the port it serves on
    is returned."""
    ports = iter([40001, 40002])
    monkeypatch.setattr(startup, "free_port", lambda: next(ports))
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
        port = startup.on_a_free_port("kube-apiserver", start, lambda p: p == 40002, log, timeout=10)
    finally:
        for pid in pids[1:]:
            os.killpg(pid, 9)
    assert (port, started) == (40002, [40001, 40002])


def test_a_component_that_fails_for_another_reason_is_not_started_again(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(startup, "free_port", lambda: 40003)
    log = tmp_path / "kube-scheduler.log"
    started: list[int] = []

    def start(port: int) -> int:
        started.append(port)
        return spawn(["sh", "-c", "echo 'no such flag: --feature-gates'; exit 1"], log)
    with pytest.raises(ClusterError, match="kube-scheduler exited during startup") as e:
        startup.on_a_free_port("kube-scheduler", start, lambda p: False, log, timeout=10)
    assert started == [40003] and "no such flag" in str(e.value)
