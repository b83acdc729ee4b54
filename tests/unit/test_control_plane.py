"""`cluster up`'s own code paths that need no processes: readiness errors and private state."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from proxy.cluster.control_plane import Cluster, ClusterError, _wait


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
    c.state = {"tokens": {"admin": "secret"}}
    c.save()
    assert (state / "cluster.json").stat().st_mode & 0o777 == 0o600
    assert state.stat().st_mode & 0o777 == 0o700
    (state / "cluster.json").chmod(0o644)  # a file an older version wrote is narrowed on the next save
    c.save()
    assert (state / "cluster.json").stat().st_mode & 0o777 == 0o600
