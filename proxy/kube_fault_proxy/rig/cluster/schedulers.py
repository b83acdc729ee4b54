"""The scheduler on the local control plane, kube-scheduler or YuniKorn: its start (through the proxy when asked),
and the stop, `kill -9`, graceful stop (a signal and a bound), restart and regate that scenarios, searches and gate
matrices ask for."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from kube_fault_proxy.rig.cluster import build, feature_gates
from kube_fault_proxy.rig.cluster.processes import kill_group, port_in_use, wait_exit
from kube_fault_proxy.rig.cluster.record import Cluster, ClusterError
from kube_fault_proxy.rig.cluster.startup import on_a_free_port, say, wait_ready

SCHEDULERS = ("none", "kube-scheduler", "yunikorn")
SCHEDULER_BINARIES = {"kube-scheduler": "kube-scheduler", "yunikorn": "yunikorn-scheduler"}  # scheduler -> component
YUNIKORN_PORT = 9080
YUNIKORN_NAMESPACE = "yunikorn"


def scheduler_build(scheduler: str, components: dict[str, build.Component],
                    gates: Mapping[str, Mapping[str, bool]] | None = None) -> str | None:
    """The scheduler's exact build plus its gates (its target): `kube-scheduler v1.36.3 SchedulerAsyncAPICalls=true`."""
    binary = SCHEDULER_BINARIES.get(scheduler)
    return feature_gates.target(f"{scheduler} {components[binary].version}", gates or {}, scheduler) if binary else None


def start(c: Cluster, binaries: Mapping[str, Path], gates: Mapping[str, Mapping[str, bool]], timeout: float,
          announce: bool = True) -> None:
    """Start the scheduler the state names (none: nothing), from its binary in `binaries`, and wait until it is
    ready; its binary is recorded, so `start_scheduler` starts the same build again."""
    binary = SCHEDULER_BINARIES.get(c.state.scheduler)
    if binary is None:
        return
    c.state.scheduler_binary = str(binaries[binary])
    if c.state.scheduler == "kube-scheduler":
        _start_kube_scheduler(c, binaries[binary], feature_gates.flag(gates, "kube-scheduler"), timeout, announce)
    else:
        _start_yunikorn(c, binaries[binary], timeout, announce)


def _kubeconfig(c: Cluster, who: str) -> Path:
    component = "kube-scheduler" if who == "scheduler" else who
    return c.kubeconfig(f"{who}-via-proxy" if c.via_proxy(component) else who)


def _start_kube_scheduler(c: Cluster, binary: Path, gates: list[str], timeout: float, announce: bool) -> None:
    config = c.dir / "kube-scheduler.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(_kubeconfig(c, "scheduler")),
                             "contentType": "application/json", "qps": 500, "burst": 1000},
        "leaderElection": {"leaderElect": False}}))
    log = c.log("kube-scheduler")

    def start_on(port: int) -> int:
        # A pod whose bind failed waits in kube-scheduler's unschedulable queue for up to 5 minutes by
        # default; 20 s keeps every run's horizon short (the flag is deprecated but still honoured).
        return c.start("kube-scheduler", [str(binary), f"--config={config}", "--bind-address=127.0.0.1",
                                          f"--secure-port={port}", "--pod-max-in-unschedulable-pods-duration=20s",
                                          *gates], log)
    on_a_free_port("kube-scheduler", start_on,
                   lambda port: httpx.get(f"https://127.0.0.1:{port}/readyz", verify=False, timeout=1).text == "ok",
                   log, timeout)
    if announce:
        say("  kube-scheduler ready" + (" (through the proxy)" if c.via_proxy("kube-scheduler") else ""))


def _start_yunikorn(c: Cluster, binary: Path, timeout: float, announce: bool) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE_")}
    env.update(KUBECONFIG=str(_kubeconfig(c, "yunikorn")), NAMESPACE=YUNIKORN_NAMESPACE)
    log = c.log("yunikorn")
    pid = c.start("yunikorn", [str(binary)], log, env=env, cwd=c.dir)
    url = f"http://127.0.0.1:{YUNIKORN_PORT}"
    wait_ready("yunikorn", lambda: httpx.get(f"{url}/ws/v1/scheduler/healthcheck", timeout=1).status_code == 200,
               pid, log, timeout)
    c.state.yunikorn = url
    if announce:
        say(f"  YuniKorn ready, REST on {url}" + (" (through the proxy)" if c.via_proxy("yunikorn") else ""))


def stop_scheduler(c: Cluster, timeout: float = 120.0) -> None:
    """Stop the scheduler `up` started (its process group, SIGKILL after 5 s); `start_scheduler` starts it again."""
    scheduler = c.state.scheduler
    if SCHEDULER_BINARIES.get(scheduler) is None or c.state.scheduler_binary is None:
        raise ClusterError(f"no scheduler to stop in {c.dir}")
    c.forget(scheduler)
    _wait_scheduler_port(scheduler, timeout)


def kill_scheduler(c: Cluster, timeout: float = 120.0) -> int:
    """`kill -9` the scheduler `up` started (its process group, SIGKILL at once, no SIGTERM): a crash, as
    between two of its writes; returns its pid. `start_scheduler` starts the same build again."""
    scheduler = c.state.scheduler
    proc = c.state.processes.get(scheduler)
    if SCHEDULER_BINARIES.get(scheduler) is None or proc is None:
        raise ClusterError(f"no scheduler to kill in {c.dir}")
    pid = proc.pid
    if not kill_group(pid):
        raise ClusterError(f"{scheduler} (pid {pid}) still runs after SIGKILL")
    c.state.processes.pop(scheduler)
    c.save()
    _wait_scheduler_port(scheduler, timeout)
    return pid


# The signals a graceful stop may send: what a kubelet sends a container (TERM) and what Ctrl-C sends (INT).
# YuniKorn's shim and kube-scheduler handle both the same way.
GRACEFUL_SIGNALS = {"TERM": signal.SIGTERM, "INT": signal.SIGINT}


@dataclass(frozen=True)
class GracefulStop:
    """What a graceful stop saw: the pid signalled, the seconds to its exit (None: it outlived the bound and was
    killed), and its exit code (None where the rig is not its parent; negative: the signal that ended it)."""

    pid: int
    exit_seconds: float | None
    exit_code: int | None

    @property
    def timed_out(self) -> bool:
        """Whether it was still running at the bound (and was SIGKILLed)."""
        return self.exit_seconds is None


def signal_scheduler(c: Cluster, sig: str, within: float, timeout: float = 120.0) -> GracefulStop:
    """Stop the scheduler `up` started as a kubelet stops a container: `sig` (TERM or INT) to its main process
    alone, then up to `within` seconds for it to exit. Whatever is left of its process group then (all of it, if
    it outlived the bound) is SIGKILLed, so nothing stays behind. `start_scheduler` starts the same build again.

    The main process, not the group: a container runtime signals the container's first process, and the
    scheduler's own handler is what is under test. The rig starts the scheduler's binary itself as the leader
    of a new group (no shell between), so its pid is the group's id."""
    scheduler = c.state.scheduler
    proc = c.state.processes.get(scheduler)
    if SCHEDULER_BINARIES.get(scheduler) is None or proc is None:
        raise ClusterError(f"no scheduler to stop in {c.dir}")
    pid = proc.pid
    try:
        os.kill(pid, GRACEFUL_SIGNALS[sig])
    except ProcessLookupError:
        raise ClusterError(f"{scheduler} (pid {pid}) was not running when it was to be stopped") from None
    seconds, code = wait_exit(pid, within)
    if not kill_group(pid):
        raise ClusterError(f"{scheduler} (pid {pid}) still runs after SIGKILL")
    if seconds is None:  # killed at the bound: its status (-9) is the rig's doing, not the scheduler's exit
        code = None
    c.state.processes.pop(scheduler)
    c.save()
    _wait_scheduler_port(scheduler, timeout)
    return GracefulStop(pid, seconds, code)


def _wait_scheduler_port(scheduler: str, timeout: float) -> None:
    """YuniKorn's fixed REST port, until the old process has let it go."""
    if scheduler == "yunikorn":
        deadline = time.monotonic() + timeout
        while port_in_use(YUNIKORN_PORT, "0.0.0.0"):  # the old process's REST port, until it is gone
            if time.monotonic() > deadline:
                raise ClusterError(f"port {YUNIKORN_PORT} still in use {timeout:g}s after stopping YuniKorn")
            time.sleep(0.2)


def start_scheduler(c: Cluster, timeout: float = 120.0) -> float:
    """Start the same scheduler build `up` started (after `stop_scheduler`), through the proxy if
    there is one, and wait until it is ready; returns the seconds it took. It starts from a relist."""
    t0 = time.monotonic()
    scheduler = c.state.scheduler
    binary = SCHEDULER_BINARIES.get(scheduler)
    if binary is None or c.state.scheduler_binary is None:
        raise ClusterError(f"no scheduler to start in {c.dir}")
    if scheduler in c.state.processes:
        raise ClusterError(f"{scheduler} is already running in {c.dir}")
    start(c, {binary: Path(c.state.scheduler_binary)}, c.feature_gates, timeout, announce=False)
    c.save()
    return time.monotonic() - t0


def restart_scheduler(c: Cluster, timeout: float = 120.0) -> float:
    """Stop the scheduler and start the same build again (patched or not), against the same
    apiserver and proxy; returns the seconds it took.

    For cases that must not inherit a scheduler's memory of the previous one (a fault matrix cell,
    a search trial): etcd, the apiserver and the proxy stay up; the scheduler starts from a relist
    with an empty cache."""
    t0 = time.monotonic()
    stop_scheduler(c, timeout)
    start_scheduler(c, timeout)
    return time.monotonic() - t0


def regate_scheduler(c: Cluster, gates: Mapping[str, bool], timeout: float = 120.0) -> float:
    """Restart kube-scheduler with these feature gates of its own (the other components' stay): another target
    of the same build on the same control plane (a gate matrix's cells); its target and build follow. Returns
    the seconds the restart took."""
    if c.state.scheduler != "kube-scheduler":
        raise ClusterError(f"no kube-scheduler to restart with other gates in {c.dir}")
    all_gates = {**c.feature_gates, "kube-scheduler": dict(gates)}
    c.state.feature_gates = {k: g for k, g in all_gates.items() if g}
    built = f"kube-scheduler {c.state.builds['kube-scheduler']}"
    c.state.scheduler_build = c.state.targets["kube-scheduler"] = feature_gates.target(
        built, all_gates, "kube-scheduler")
    c.save()
    return restart_scheduler(c, timeout)
