"""The rig's own output and Kubernetes access on the real control plane (kube-scheduler behind the proxy):
progress on a terminal and off one, and the informer's relist when the proxy expires its watch."""

from __future__ import annotations

import asyncio
import itertools
import re
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_fault_proxy.kube.informer import Informer
from kube_fault_proxy.kube.kubeapi import Kube, Pod, ensure_namespace
from kube_fault_proxy.proxy.control.client import ControlClient
from kube_fault_proxy.rig.cluster.record import Cluster

from tests.support.terminal import in_pty, piped

KFP = [sys.executable, "-m", "kube_fault_proxy"]


@pytest.fixture
def cluster(kube_scheduler_cluster: Cluster) -> Cluster:
    """The session's kube-scheduler cluster: each test here works in a namespace of its own."""
    return kube_scheduler_cluster


def progress_lines(lines: list[tuple[float, str]], task: str) -> list[tuple[float, str]]:
    return [(t, line) for t, line in lines if line.startswith(f"  {task}: ")]


def spaced(lines: list[tuple[float, str]], seconds: float) -> bool:
    """Every plain progress line but the last (written when the task ends) came `seconds` after the one before."""
    times = [t for t, _ in lines[:-1]]
    return all(b - a >= seconds for a, b in itertools.pairwise(times))


def test_load_on_a_terminal_draws_a_bar(cluster: Cluster) -> None:
    ns = f"tty-{uuid.uuid4().hex[:6]}"
    code, out = in_pty([*KFP, "load", "pods", "--kubeconfig", str(cluster.kubeconfig("admin")), "--count", "300",
                        "--rate", "100", "--namespace", ns], timeout=120)
    assert code == 0, out
    assert "━" in out and "300/300" in out and "created 300/300 pods" in out
    assert "  pods: " not in out  # the plain lines are for logs, not terminals


def test_load_in_a_log_writes_a_line_every_few_seconds(cluster: Cluster) -> None:
    ns = f"log-{uuid.uuid4().hex[:6]}"
    run = piped([*KFP, "load", "pods", "--kubeconfig", str(cluster.kubeconfig("admin")), "--count", "600",
                 "--rate", "50", "--namespace", ns], timeout=120)
    assert run.code == 0, run.text
    lines = progress_lines(run.lines, "pods")
    seconds = lines[-1][0]  # since the command started
    assert seconds >= 12  # 600 pods at 50/s: the load really took long enough to show throttling
    assert 2 <= len(lines) <= seconds / 5 + 1, run.text
    assert spaced(lines, 4.9), run.text
    assert lines[-1][1].startswith("  pods: 600/600 sent, 600 created, 0 failed")
    assert "\r" not in run.text and "\x1b[" not in run.text
    assert "created 600/600 pods" in run.lines[-1][1]


def test_a_scenario_in_a_log_settles_with_a_line_every_few_seconds(cluster: Cluster, tmp_path: Path) -> None:
    # Every Binding of the run is held 12 s (kube-scheduler binds in parallel): the settle takes that
    # long, nothing changes meanwhile, and today's output would have been one '\r' update per snapshot.
    ns = f"settle-{uuid.uuid4().hex[:6]}"
    control = ControlClient(cluster.control_url)
    control.activate("hold-binds-12s", rules=[{"name": "hold", "match": {"verbs": ["create"], "subresources": ["binding"],
                                                                     "namespaces": [ns]},
                                         "fault": {"delay": {"seconds": 12}}}])
    scenario = {"apiVersion": "kube-fault-proxy/v1", "kind": "Scenario",
                "metadata": {"name": "settle-lines", "description": "binds held, a short settle"},
                "spec": {"load": {"count": 200, "rate": 100, "concurrency": 8, "namespace": ns},
                         "timeline": [{"at": "0s", "activate": "hold-binds-12s"}],
                         "settle": {"quiet": "30s", "timeout": "120s", "grace": "0s"},
                         "expect": {"kube-scheduler": {"verdict": "clean"}}}}
    path = tmp_path / "settle.yaml"
    path.write_text(yaml.safe_dump(scenario))
    try:
        run = piped([*KFP, "scenario", "run", str(path), "--kubeconfig", str(cluster.kubeconfig("admin")),
                     "--control-url", cluster.control_url, "--scheduler", "kube-scheduler",
                     "-o", str(tmp_path / "report")], timeout=300)
    finally:
        control.deactivate()
    assert run.code == 0, run.text
    settling = progress_lines(run.lines, "settling")
    seconds = settling[-1][0] - progress_lines(run.lines, "pods")[-1][0]
    assert seconds >= 10, run.text  # slow binds: the settle took long enough to show throttling
    assert 2 <= len(settling) <= seconds / 5 + 1, run.text
    assert spaced(settling, 4.9), run.text
    assert settling[-1][1].startswith("  settling: 200/200 bound")
    assert "\r" not in run.text and "\x1b[" not in run.text
    assert "| kube-scheduler | 1 | clean | yes |" in run.text  # the verdicts, as plain Markdown


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "log"])
def test_a_go_build_shows_its_progress(terminal: bool, tmp_path: Path) -> None:
    # kfp-burst (bench/burst) is the smallest component; a cache of its own makes `cluster build` build it
    argv = ["env", f"KFP_CACHE_DIR={tmp_path}", *KFP, "cluster", "build", "kfp-burst"]
    if terminal:
        code, out = in_pty(argv, timeout=600)
        assert code == 0, out
        assert "━" in out and "packages compiled" in out and "\x1b[" in out
        return
    run = piped(argv, timeout=600)
    assert run.code == 0, run.text
    lines = [(t, line) for t, line in run.lines if re.match(r"  kfp-burst src-\w+: \d", line)]
    assert len(lines) <= lines[-1][0] / 15 + 1 and spaced(lines, 14.9), run.text  # a line every 15 s at most
    done = re.fullmatch(r"  kfp-burst src-\w+: (\d+)/(\d+) packages compiled \(\d+s\)", lines[-1][1])
    assert done is not None and done[1] == done[2], run.text
    assert "\r" not in run.text and "\x1b[" not in run.text
    assert re.search(r"^  kfp-burst src-\w+: built .*/kfp-burst$", run.text, re.M), run.text


def test_the_informer_relists_when_the_proxy_expires_its_watch(cluster: Cluster) -> None:
    ns = f"inf-{uuid.uuid4().hex[:6]}"
    direct = Kube.from_kubeconfig(cluster.kubeconfig("admin"))
    with direct.client() as client:
        ensure_namespace(client, ns)
        for i in range(3):
            client.create(Pod.from_dict(_pod(ns, f"before-{i}")))
    control = ControlClient(cluster.control_url)
    since = control.cursor()
    control.activate("expire-informer", rules=[{"name": "expire", "match": {"verbs": ["watch"], "resources": ["pods"],
                                                                        "namespaces": [ns]},
                                          "when": {"maxInjections": 2}, "fault": {"expire": {}}}])
    try:
        changes = asyncio.run(_inform(Kube.from_kubeconfig(cluster.kubeconfig("admin-via-proxy")), direct, ns))
    finally:
        control.deactivate()
    relists, store, seen = changes
    assert relists == 3  # the first list, then one per expired watch
    assert len([r for r in control.injections(since) if r["fault"] == "expire"]) == 2
    assert store == {"before-1", "before-2", "after-0", "after-1"}
    assert ("DELETED", "before-0") in seen and ("ADDED", "after-1") in seen


def _pod(ns: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}


async def _inform(via_proxy: Kube, direct: Kube, ns: str) -> tuple[int, set[str], list[tuple[str, str]]]:
    """Run an informer through the proxy while pods change directly; until its store shows the changes."""
    seen: list[tuple[str, str]] = []
    async with via_proxy.async_client() as watcher, direct.async_client() as writer:
        informer = Informer(watcher, Pod, namespace=ns, server_timeout=30,
                            on_change=lambda kind, obj: seen.append((kind, obj["metadata"]["name"])))
        task = asyncio.create_task(informer.run())
        try:
            await _until(lambda: informer.relists >= 3, 30)
            await writer.delete(Pod, "before-0", namespace=ns, grace_period=0)
            for i in range(2):
                await writer.create(Pod.from_dict(_pod(ns, f"after-{i}")))
            await _until(lambda: {n for _, n in informer.store} == {"before-1", "before-2", "after-0", "after-1"}, 30)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return informer.relists, {name for _, name in informer.store}, seen


async def _until(condition: Any, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.1)
