"""What a scenario run is given (Target: where it happens) and what it records (RunResult)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kube_fault_proxy.kube.kubeapi import Kube
from kube_fault_proxy.rig.cluster.record import Cluster, ClusterError
from kube_fault_proxy.rig.invariants.check import Report


@dataclass
class Target:
    """Where a run happens: the apiserver (admin), the proxy's control plane, YuniKorn's REST API, and
    the local control plane when the run may stop and start its components (holdBack
    beforeScheduler, killApiserver, killScheduler, stopScheduler, freshScheduler)."""

    kube: Kube
    control: str
    yunikorn: str | None = None
    cluster: Cluster | None = None


def local_plane(kubeconfig: Path) -> Cluster | None:
    """The local control plane `cluster up` wrote this kubeconfig for, while it runs: the kubeconfig is one of
    those its `<state-dir>/cluster.json` lists (`<state-dir>/kubeconfigs/NAME.kubeconfig`) and a process of
    the plane is recorded. None for any other cluster's (a foreign cluster: the rig cannot restart its parts)."""
    path = kubeconfig.resolve()
    state_dir = path.parent.parent
    if not (state_dir / "cluster.json").is_file():
        return None
    try:
        c = Cluster(state_dir)
    except ClusterError:
        return None
    if path not in {p.resolve() for p in c.kubeconfigs.values()} or not c.processes:
        return None
    return c


@dataclass
class RunResult:
    """One run of a scenario with one scheduler and one seed."""

    scenario: str
    scheduler: str
    seed: int
    load: dict[str, Any] = field(default_factory=dict)
    check: dict[str, Any] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    expected: dict[str, Any] | None = None
    # The scheduler's exact build plus its gates (the target): "yunikorn v1.9.0+3355-forget-pod-reverts-1830f1776417"
    # or "kube-scheduler v1.36.3 SchedulerAsyncAPICalls=true".
    build: str | None = None
    featureGates: dict[str, dict[str, bool]] = field(default_factory=dict)  # component -> gate -> on, as run
    binds: dict[str, Any] = field(default_factory=dict)
    # Binds committed during the run: count, p50/p90/p99 (estimated), max (proxy.bind_latency.between)
    bindLatency: dict[str, Any] = field(default_factory=dict)
    wave: dict[str, Any] | None = None  # a held-back load's release (wave.summary)
    # spec.freshScheduler: whether the scheduler was restarted before the run (runner.fresh_scheduler), its pids
    freshScheduler: dict[str, Any] | None = None
    met: bool | None = None
    seconds: float = 0.0
    table: str = ""
    report: Report | None = None  # for the terminal table; not in the JSON

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {k: v for k, v in self.__dict__.items() if k not in ("table", "report")}
