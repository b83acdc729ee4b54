"""The record of one local control plane: `Cluster`, kept in `<state-dir>/cluster.json` (state.py), and the
process groups it started. Every component's lifecycle and the bring-up (control_plane.py) read and write it
through here; it starts nothing by itself but the one process it is asked to."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kube_fault_proxy import paths
from kube_fault_proxy.kube.kubeapi import Kube
from kube_fault_proxy.paths import private_dir, write_private
from kube_fault_proxy.rig.cluster import state
from kube_fault_proxy.rig.cluster.processes import signals_held, spawn, stop_groups


class ClusterError(RuntimeError):
    """Startup failed; the message names the component and its log file."""


def default_state_dir() -> Path:
    """Where `cluster` keeps certificates, data, logs and kubeconfigs."""
    return paths.state_dir() / "cluster"


@dataclass(frozen=True)
class ProxyEndpoints:
    """Where the cluster's kube-fault-proxy listens, its control plane, and the CA its clients must trust."""

    url: str
    control: str
    ca_file: Path


@dataclass(frozen=True)
class Process:
    """One process group `up` started, and its log."""

    pid: int
    log: Path


class Cluster:
    """The state of one local control plane, kept in <state_dir>/cluster.json; read it through the accessors."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir
        self.file = state_dir / "cluster.json"
        try:
            self.state = state.load(self.file)
        except state.StateFileError as e:
            raise ClusterError(str(e)) from None

    def save(self) -> None:
        """Persist after every started process, so `down` can always find it (0600: it holds tokens)."""
        private_dir(self.dir)
        write_private(self.file, self.state.to_json())

    def record(self, name: str, pid: int, log: Path) -> None:
        """Remember a started process."""
        self.state.processes[name] = state.ProcessRecord(pid=pid, log=str(log))
        self.save()

    def start(self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None,
              cwd: Path | None = None) -> int:
        """Start a daemon (its own process group) and remember it, with no signal between the two: a process
        `down` could not find is never left behind. Returns its pid."""
        with signals_held():
            pid = spawn(argv, log, env=env, cwd=cwd)
            self.record(name, pid, log)
        return pid

    def forget(self, name: str, grace: float = 5.0) -> int | None:
        """Stop a recorded process group (SIGKILL after `grace`), then forget it: until it is gone it stays in
        the state, so a signal during the stop leaves it for `down`. Returns its pid, if one was recorded."""
        proc = self.state.processes.get(name)
        if proc is None:
            return None
        stop_groups({name: proc.pid}, grace=grace)
        self.state.processes.pop(name, None)  # gone: a signal from here on leaves nothing unnamed
        self.save()
        return proc.pid

    def kubeconfig(self, name: str) -> Path:
        """One of the kubeconfigs `up` wrote."""
        return Path(self.state.kubeconfigs[name])

    @property
    def kubeconfigs(self) -> dict[str, Path]:
        """Every kubeconfig `up` wrote, by name."""
        return {name: Path(path) for name, path in self.state.kubeconfigs.items()}

    @property
    def apiserver(self) -> str:
        """kube-apiserver's URL."""
        if self.state.apiserver is None:
            raise ClusterError(f"no kube-apiserver recorded in {self.dir}")
        return self.state.apiserver

    @property
    def proxy(self) -> ProxyEndpoints | None:
        """The proxy in front of the apiserver, when `up --proxy` started one."""
        p = self.state.proxy
        return ProxyEndpoints(p.url, p.control, Path(p.ca_file)) if p else None

    @property
    def journal(self) -> Path:
        """The proxy's journal file (`up --proxy` writes it here)."""
        return self.dir / "journal.jsonl"

    @property
    def control_url(self) -> str:
        """The proxy's control plane (the cluster must have been brought up with the proxy)."""
        if self.proxy is None:
            raise ClusterError(f"the cluster in {self.dir} runs no proxy")
        return self.proxy.control

    @property
    def scheduler(self) -> str:
        """The scheduler `up` started: none, kube-scheduler or yunikorn."""
        return self.state.scheduler

    @property
    def scheduler_build(self) -> str | None:
        """The scheduler's exact build, e.g. `yunikorn v1.9.0+3355-forget-pod-reverts-1a2b3c4d5e6f`."""
        return self.state.scheduler_build

    @property
    def scheduler_variant(self) -> str | None:
        """For a patched or source-built YuniKorn, what it was built from."""
        return self.state.scheduler_variant

    @property
    def yunikorn_url(self) -> str | None:
        """YuniKorn's REST API, when it runs."""
        return self.state.yunikorn

    @property
    def feature_gates(self) -> dict[str, dict[str, bool]]:
        """The gates `up` set: component -> gate -> on."""
        return {c: dict(g) for c, g in self.state.feature_gates.items()}

    @property
    def through_proxy(self) -> tuple[str, ...]:
        """The clients whose kubeconfig points at the proxy."""
        return tuple(self.state.through_proxy or ())

    def via_proxy(self, component: str) -> bool:
        """Whether a component's kubeconfig points at the proxy: there is one, and the component is among the
        clients `up` sent through it (the scheduler alone, when a state names none)."""
        proxied = self.state.through_proxy if self.state.through_proxy is not None else [self.scheduler]
        return self.proxy is not None and component in proxied

    @property
    def targets(self) -> dict[str, str]:
        """Each Kubernetes component's build plus its gates: `kube-scheduler v1.36.3 SchedulerAsyncAPICalls=true`."""
        return dict(self.state.targets)

    @property
    def nodes(self) -> int:
        """How many KWOK nodes `up` created."""
        return self.state.nodes

    @property
    def processes(self) -> dict[str, Process]:
        """Every process group still recorded, by component name."""
        return {name: Process(p.pid, Path(p.log)) for name, p in self.state.processes.items()}

    def log(self, component: str) -> Path:
        """A component's log file (whether or not it still runs)."""
        return self.dir / "logs" / f"{component}.log"

    def admin_api(self) -> Kube:
        """The admin token, straight to the apiserver."""
        return Kube.from_token(self.apiserver, self.state.tokens["admin"], self.dir / "pki" / "ca.crt")
