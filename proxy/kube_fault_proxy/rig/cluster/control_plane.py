"""`cluster up|down|status|env`: etcd, kube-apiserver, kube-controller-manager, fake nodes run by
KWOK, and optionally kube-fault-proxy and a scheduler whose kubeconfig points at it."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from lightkube import Client
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from kube_fault_proxy import paths, shipped
from kube_fault_proxy.kube.kubeapi import ApiError, HTTPError, Kube, Node, ensure_namespace
from kube_fault_proxy.paths import private_dir, write_private
from kube_fault_proxy.rig.cluster import build, controller_manager, feature_gates, kwok, pki, real_node, state, versions
from kube_fault_proxy.rig.cluster.processes import (
    PORT_TAKEN,
    Stopped,
    alive,
    free_port,
    kill_group,
    live_groups,
    log_size,
    port_in_use,
    said_since,
    signals_held,
    spawn,
    stop_groups,
)
from kube_fault_proxy.rig.cluster.proxy_process import ServeFailed, start_serve

SCHEDULERS = ("none", "kube-scheduler", "yunikorn")
# Clients whose kubeconfig may point at the proxy (`--through-proxy`); by default the scheduler alone.
THROUGH_PROXY = ("kube-scheduler", "yunikorn", "kube-controller-manager")
YUNIKORN_PORT = 9080
YUNIKORN_NAMESPACE = "yunikorn"
ETCD_COMPACTION_INTERVAL = "10m"  # history the apiserver keeps in etcd: at least this, at most twice it


# Token users: (name, ',"groups"'). Only the admin is in system:masters; API Priority and Fairness
# applies to every other one, as to a cluster's components.
USERS = {"admin": ("kfp-admin", ",system:masters"), "scheduler": ("system:kube-scheduler", ""),
         "yunikorn": ("yunikorn", ""), "controller-manager": ("system:kube-controller-manager", ""),
         "kwok": ("kwok", "")}


class ClusterError(RuntimeError):
    """Startup failed; the message names the component and its log file."""


class UsageError(ClusterError):
    """Options that do not fit together (feature gates or --through-proxy for a component not started)."""


@dataclass(frozen=True)
class Options:
    """What `cluster up` starts."""

    state_dir: Path
    nodes: int = 50
    scheduler: str = "none"
    proxy: bool = False
    profile: str | None = None
    profiles_dir: Path = shipped.PROFILES
    timeout: float = 120.0
    node_cpu: str = "16"
    node_memory: str = "64Gi"
    node_pods: int = 110
    controllers: tuple[str, ...] = controller_manager.CONTROLLERS
    # kube-apiserver's --http2-max-streams-per-connection (0: its default, 100) and the proxy's
    # advertised limit. The same in both, so direct and proxied runs dial alike (docs/guides/front-of-a-cluster.md).
    apiserver_max_streams: int = 4096
    proxy_max_streams: int = 4096
    # With scheduler yunikorn: v1.9.0 with this patch, or this yunikorn-k8shim checkout (build.yunikorn).
    yunikorn_patch: Path | None = None
    yunikorn_source: Path | None = None
    # component -> gate -> on, passed to that binary's --feature-gates (feature_gates.COMPONENTS).
    feature_gates: Mapping[str, Mapping[str, bool]] = field(default_factory=dict)
    # The clients whose kubeconfig points at the proxy (THROUGH_PROXY); None: the scheduler, if any.
    through_proxy: tuple[str, ...] | None = None
    # A real kubelet with containerd and runc beside the KWOK nodes (real_node.py).
    real_node: bool = False
    # The Kubernetes release of kube-apiserver, kube-controller-manager, kube-scheduler and kubectl (and its etcd).
    kubernetes: str = versions.KUBERNETES
    # kube-apiserver's --runtime-config entries (`scheduling.k8s.io/v1beta1=true`: a beta API it serves only when
    # asked, such as gang scheduling's Workload and PodGroup).
    runtime_config: tuple[str, ...] = ()

    def proxied(self) -> tuple[str, ...]:
        """The clients that go through the proxy (none without one)."""
        if not self.proxy:
            return ()
        if self.through_proxy is None:
            return (self.scheduler,) if self.scheduler in SCHEDULER_BINARIES else ()
        return self.through_proxy


def default_state_dir() -> Path:
    """Where `cluster` keeps certificates, data, logs and kubeconfigs."""
    return paths.state_dir() / "cluster"


def _kubeconfig(server: str, ca: Path | bytes, user: dict[str, Any]) -> dict[str, Any]:
    cluster: dict[str, Any] = {"server": server}
    if isinstance(ca, Path):
        cluster["certificate-authority"] = str(ca)
    else:
        import base64

        cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
    return {"apiVersion": "v1", "kind": "Config", "current-context": "kfp",
            "clusters": [{"name": "kfp", "cluster": cluster}],
            "users": [{"name": "kfp", "user": user}],
            "contexts": [{"name": "kfp", "context": {"cluster": "kfp", "user": "kfp", "namespace": "default"}}]}


def _write_yaml(path: Path, doc: dict[str, Any]) -> Path:
    return write_private(path, yaml.safe_dump(doc, sort_keys=False))


def _wait(what: str, check: Callable[[], bool], pid: int, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = "it never answered ready"
    while time.monotonic() < deadline:
        if not alive(pid):
            raise ClusterError(f"{what} exited during startup; see {log}:\n{_tail(log)}")
        try:
            if check():
                return
            last = "it answered, but not ready"
        except (httpx.HTTPError, HTTPError, OSError) as e:  # e.g. a certificate the client refuses: say so
            last = f"{type(e).__name__}: {e}"
        time.sleep(0.1)
    raise ClusterError(f"{what} not ready after {timeout:.0f}s (last attempt: {last}); see {log}:\n{_tail(log)}")


def _on_a_free_port(what: str, start: Callable[[int], int], ready: Callable[[int], bool], log: Path,
                    timeout: float, tries: int = 3) -> int:
    """Start a component that cannot bind port 0 itself (kube-apiserver refuses 0; kube-scheduler,
    kube-controller-manager and KWOK turn their serving off with it) on a port free a moment ago, and
    pick another if something took it in between (the component exits saying so). The port it serves on."""
    for attempt in range(1, tries + 1):
        port, offset = free_port(), log_size(log)
        pid = start(port)
        try:
            _wait(what, functools.partial(ready, port), pid, log, timeout)
            return port
        except ClusterError:
            if attempt == tries or alive(pid) or not said_since(log, offset, PORT_TAKEN):
                raise
            say(f"  {what}: port {port} was taken before it could bind it; trying another")
    raise AssertionError("unreachable")


def _etcd_client_url(log: Path) -> str | None:
    """The client URL etcd serves on, from its own log (it binds port 0 itself)."""
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if '"msg":"serving client traffic insecurely' in line:
            with contextlib.suppress(json.JSONDecodeError, KeyError):
                return f"http://{json.loads(line)['address']}"
    return None


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


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


def say(msg: str) -> None:
    """Progress on stderr."""
    print(msg, file=sys.stderr, flush=True)


SCHEDULER_BINARIES = {"kube-scheduler": "kube-scheduler", "yunikorn": "yunikorn-scheduler"}  # scheduler -> component


def needed_components(scheduler: str) -> list[str]:
    """What `up` starts (and kubectl, which `cluster env` advertises), for this scheduler."""
    own = [SCHEDULER_BINARIES[scheduler]] if scheduler in SCHEDULER_BINARIES else []
    return ["etcd", "kube-apiserver", "kube-controller-manager", "kwok", "kubectl", *own]


def up(opts: Options) -> Cluster:
    """Start everything asked for; on any failure stop what was started and raise ClusterError."""
    if opts.scheduler not in SCHEDULERS:
        raise ClusterError(f"--scheduler must be one of {', '.join(SCHEDULERS)}")
    existing = Cluster(opts.state_dir)
    if live_groups({p.pid for p in existing.processes.values()}):
        raise ClusterError(f"a cluster is already running from {opts.state_dir}: run `cluster down` first")
    if (opts.yunikorn_patch or opts.yunikorn_source) and opts.scheduler != "yunikorn":
        raise build.BuildInputError("--yunikorn-patch and --yunikorn-source need --scheduler yunikorn")
    _check_targets(opts)
    if opts.real_node:
        try:
            real_node.preflight()  # before anything starts: root, and no other real node's pods running
        except real_node.RealNodeError as e:
            raise UsageError(str(e)) from None
    if opts.scheduler == "yunikorn" and port_in_use(YUNIKORN_PORT, "0.0.0.0"):
        raise ClusterError(f"port {YUNIKORN_PORT} is in use: YuniKorn's REST port is fixed (another YuniKorn?)")
    needed = needed_components(opts.scheduler)
    components = {**build.components(opts.kubernetes),
                  "yunikorn-scheduler": build.yunikorn(opts.yunikorn_patch, opts.yunikorn_source)}
    if opts.feature_gates:  # a gate the release lacks: said now, not by a binary that exits at startup
        names = build.known_gates(opts.kubernetes)
        if names is None:
            say(f"  feature gates not checked against {opts.kubernetes}: no go toolchain to read its source")
        else:
            try:
                feature_gates.check(opts.feature_gates, opts.kubernetes, names)
            except ValueError as e:
                raise UsageError(str(e)) from None
    binaries = build.build_all(needed, overrides=components)
    shutil.rmtree(opts.state_dir, ignore_errors=True)
    c = Cluster(opts.state_dir)
    c.state = state.ClusterState(
        started_at=time.time(), scheduler=opts.scheduler, nodes=opts.nodes,
        builds={n: components[n].version for n in needed},
        scheduler_build=scheduler_build(opts.scheduler, components, opts.feature_gates),
        feature_gates={c: dict(g) for c, g in opts.feature_gates.items() if g},
        through_proxy=list(opts.proxied()), controllers=list(opts.controllers),
        targets={n: feature_gates.target(f"{n} {components[n].version}", opts.feature_gates, n)
                 for n in needed if n in feature_gates.COMPONENTS},
        scheduler_variant=components["yunikorn-scheduler"].variant if opts.scheduler == "yunikorn" else None,
        apiserver_max_streams=opts.apiserver_max_streams,
        proxy_max_streams=opts.proxy_max_streams if opts.proxy else None)
    c.save()
    try:
        _start(c, opts, binaries)
    except BaseException:
        down(opts.state_dir)
        raise
    return c


@contextlib.contextmanager
def running(opts: Options, keep: bool = False) -> Iterator[Cluster]:
    """The one way to bring a cluster up and down: `up` on entry, `down` on exit however the block ends.

    Logs, the journal and the kubeconfigs stay for a post-mortem; etcd's data (~70 MB a run) goes. With
    `keep`, everything stays up (`cluster down` ends it later)."""
    c = up(opts)
    try:
        yield c
    finally:
        if not keep:
            down(c.dir)
            shutil.rmtree(c.dir / "etcd", ignore_errors=True)


def scheduler_build(scheduler: str, components: dict[str, build.Component],
                    gates: Mapping[str, Mapping[str, bool]] | None = None) -> str | None:
    """The scheduler's exact build plus its gates (its target): `kube-scheduler v1.36.3 SchedulerAsyncAPICalls=true`."""
    binary = SCHEDULER_BINARIES.get(scheduler)
    return feature_gates.target(f"{scheduler} {components[binary].version}", gates or {}, scheduler) if binary else None


def _check_targets(opts: Options) -> None:
    """Gates only for the Kubernetes components `up` starts; --through-proxy only for clients it starts."""
    for component in opts.feature_gates:
        if component not in feature_gates.COMPONENTS:
            raise UsageError(f"feature gates for {component!r}: must be one of {', '.join(feature_gates.COMPONENTS)}")
    if opts.feature_gates.get("kube-scheduler") and opts.scheduler != "kube-scheduler":
        raise UsageError("feature gates for kube-scheduler need --scheduler kube-scheduler")
    for client in opts.through_proxy or ():
        if client not in THROUGH_PROXY:
            raise UsageError(f"--through-proxy {client!r}: must be one of {', '.join(THROUGH_PROXY)}")
        if client in SCHEDULER_BINARIES and client != opts.scheduler:
            raise UsageError(f"--through-proxy {client} needs --scheduler {client}")


def _start(c: Cluster, opts: Options, binaries: dict[str, Path]) -> None:
    d = c.dir
    logs = d / "logs"
    certs = pki.make(d / "pki")
    tokens = {name: secrets.token_hex(16) for name in USERS}
    write_private(d / "tokens.csv", "".join(f"{tokens[who]},{user},kfp-{who}{groups}\n"
                                            for who, (user, groups) in USERS.items()))
    c.state.tokens = tokens

    t0 = time.monotonic()
    # etcd binds port 0 itself and names the port in its log (at level info: "serving client traffic");
    # one member, so its peer URL is never dialled and port 0 does for it too.
    log = logs / "etcd.log"
    pid = c.start("etcd", [str(binaries["etcd"]), "--name", "kfp", "--data-dir", str(d / "etcd"),
                 "--listen-client-urls", "http://127.0.0.1:0", "--advertise-client-urls", "http://127.0.0.1:0",
                 "--listen-peer-urls", "http://127.0.0.1:0", "--initial-advertise-peer-urls", "http://127.0.0.1:0",
                 "--initial-cluster", "kfp=http://127.0.0.1:0", "--unsafe-no-fsync",
                 # etcd compacts nothing by itself (its default, said out loud): the apiserver's
                 # compactor alone decides how much history a stale LIST can be served from.
                 "--auto-compaction-retention=0",
                 "--log-level", "info"], log)
    found: list[str] = []

    def etcd_ready() -> bool:
        url = found[0] if found else _etcd_client_url(log)
        if url is None:
            return False
        found[:] = [url]
        return httpx.get(f"{url}/health", timeout=1).status_code == 200
    _wait("etcd", etcd_ready, pid, log, opts.timeout)
    etcd_url = found[0]

    def apiserver_argv(api_port: int) -> list[str]:
        return [
            str(binaries["kube-apiserver"]), f"--etcd-servers={etcd_url}", "--bind-address=127.0.0.1",
            f"--secure-port={api_port}", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
            f"--tls-cert-file={certs / 'apiserver.crt'}", f"--tls-private-key-file={certs / 'apiserver.key'}",
            f"--client-ca-file={certs / 'ca.crt'}", f"--token-auth-file={d / 'tokens.csv'}",
            "--authorization-mode=RBAC", "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={certs / 'sa.pub'}",
            f"--service-account-signing-key-file={certs / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            f"--http2-max-streams-per-connection={opts.apiserver_max_streams}",
            # Every interval the apiserver compacts etcd to the revision it noted one interval before, so
            # 10-20 minutes of history stay (the default 5m keeps 5-10): staleList serves LISTs from it.
            f"--etcd-compaction-interval={ETCD_COMPACTION_INTERVAL}",
            # SO_REUSEADDR: after a kill -9 (kill_apiserver) the same port binds again at once instead
            # of waiting out the killed connections' TIME_WAIT.
            "--permit-address-sharing", *feature_gates.flag(opts.feature_gates, "kube-apiserver"),
            *([f"--runtime-config={','.join(opts.runtime_config)}"] if opts.runtime_config else []),
            *(real_node.apiserver_flags(certs) if opts.real_node else [])]

    def start_apiserver_on(api_port: int) -> int:
        c.state.apiserver = f"https://127.0.0.1:{api_port}"
        c.state.apiserver_argv = apiserver_argv(api_port)
        return _spawn_apiserver(c)
    api_port = _on_a_free_port("kube-apiserver", start_apiserver_on, lambda _: c.admin_api().ready(),
                               c.log("kube-apiserver"), opts.timeout)
    server = f"https://127.0.0.1:{api_port}"
    api = c.admin_api()
    say(f"  etcd and kube-apiserver ready on {server} ({time.monotonic() - t0:.1f}s)")

    ca = certs / "ca.crt"
    kc = d / "kubeconfigs"
    kc.mkdir(exist_ok=True)
    users: dict[str, dict[str, str]] = {
        "admin": {"token": tokens["admin"]},
        "admin-cert": {"client-certificate": str(certs / "admin.crt"), "client-key": str(certs / "admin.key")},
        **{who: {"token": tokens[who]} for who in ("scheduler", "yunikorn", "controller-manager", "kwok")},
        "proxy-upstream": {},  # the proxy's own credentials come with each request it relays
    }
    c.state.kubeconfigs = {name: str(_write_yaml(kc / f"{name}.kubeconfig", _kubeconfig(server, ca, user)))
                              for name, user in users.items()}
    c.save()
    # A kube-controller-manager under test goes through the proxy, which must be there first; otherwise the
    # proxy starts once the nodes are Ready, as it always has.
    kcm_proxied = "kube-controller-manager" in opts.proxied()
    if kcm_proxied:
        _start_proxy(c, opts)
    _start_controller_manager(c, opts, binaries["kube-controller-manager"])
    with api.client() as client:
        _seed_objects(client, opts)
    _start_kwok(c, opts, binaries["kwok"])
    if opts.real_node:
        try:
            real_node.start(c, opts.timeout, say)
        except real_node.RealNodeError as e:
            raise ClusterError(str(e)) from None

    if opts.proxy and not kcm_proxied:
        _start_proxy(c, opts)
    _start_scheduler(c, opts, binaries)
    c.save()



def _spawn_apiserver(c: Cluster) -> int:
    """kube-apiserver from the argv recorded in the state (flags, port, certificates and etcd); its pid."""
    log = c.log("kube-apiserver")
    if c.state.apiserver_argv is None:
        raise ClusterError(f"no kube-apiserver command line recorded in {c.dir}")
    return c.start("kube-apiserver", list(c.state.apiserver_argv), log)


def _start_apiserver(c: Cluster, timeout: float) -> None:
    """kube-apiserver again, exactly as `up` started it (same port: its clients keep their URL); waits until ready."""
    _wait("kube-apiserver", c.admin_api().ready, _spawn_apiserver(c), c.log("kube-apiserver"), timeout)


def kill_apiserver(c: Cluster) -> int:
    """`kill -9` the real kube-apiserver (its process group), as the seed did; returns its pid.

    etcd, the proxy and every client stay up; `start_apiserver` brings it back on the same URL."""
    proc = c.state.processes.get("kube-apiserver")
    if proc is None or c.state.apiserver_argv is None:
        raise ClusterError(f"no kube-apiserver to kill in {c.dir}")
    pid = proc.pid
    if not kill_group(pid):
        raise ClusterError(f"kube-apiserver (pid {pid}) still runs after SIGKILL")
    c.state.processes.pop("kube-apiserver")
    c.save()
    return pid


def start_apiserver(c: Cluster, timeout: float = 120.0) -> float:
    """Start kube-apiserver again after `kill_apiserver`, exactly as `up` did; the seconds until it was ready."""
    t0 = time.monotonic()
    _start_apiserver(c, timeout)
    return time.monotonic() - t0


def _start_scheduler(c: Cluster, opts: Options, binaries: dict[str, Path], announce: bool = True) -> None:
    binary = SCHEDULER_BINARIES.get(opts.scheduler)
    if binary is None:
        return
    c.state.scheduler_binary = str(binaries[binary])
    start = _start_kube_scheduler if opts.scheduler == "kube-scheduler" else _start_yunikorn
    start(c, opts, binaries[binary], announce=announce)


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


def regate_controller_manager(c: Cluster, gates: Mapping[str, bool], timeout: float = 120.0) -> float:
    """Restart kube-controller-manager with these feature gates of its own and the controllers `up` gave it
    (through the proxy if it was): another target of the same build on the same control plane; its target
    follows. Returns the seconds the restart took."""
    t0 = time.monotonic()
    controllers = c.state.controllers
    if "kube-controller-manager" not in c.state.processes or controllers is None:
        raise ClusterError(f"no kube-controller-manager to restart with other gates in {c.dir}")
    c.forget("kube-controller-manager")
    all_gates = {**c.feature_gates, "kube-controller-manager": dict(gates)}
    c.state.feature_gates = {k: g for k, g in all_gates.items() if g}
    built = f"kube-controller-manager {c.state.builds['kube-controller-manager']}"
    c.state.targets["kube-controller-manager"] = feature_gates.target(
        built, all_gates, "kube-controller-manager")
    c.save()
    opts = Options(state_dir=c.dir, nodes=c.nodes, scheduler=c.scheduler, proxy=c.proxy is not None,
                   timeout=timeout, feature_gates=all_gates, through_proxy=c.through_proxy,
                   controllers=tuple(controllers))
    _start_controller_manager(c, opts, build.build(build.kubernetes(
        "kube-controller-manager", c.state.builds["kube-controller-manager"]), say=False))
    c.save()
    return time.monotonic() - t0


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
    opts = Options(state_dir=c.dir, nodes=c.state.nodes, scheduler=scheduler,
                   proxy=c.state.proxy is not None, timeout=timeout, feature_gates=c.feature_gates,
                   through_proxy=c.through_proxy if c.state.through_proxy is not None else None)
    _start_scheduler(c, opts, {binary: Path(c.state.scheduler_binary)}, announce=False)
    c.save()
    return time.monotonic() - t0


def _create(client: Client, obj: Any) -> None:
    """Create unless it exists."""
    try:
        client.create(obj)
    except ApiError as e:
        if e.status.code != 409:
            raise


def _seed_objects(client: Client, opts: Options) -> None:
    ensure_namespace(client, YUNIKORN_NAMESPACE)
    _create(client, ClusterRoleBinding.from_dict({
        "metadata": {"name": "kfp-yunikorn"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "yunikorn"}]}))
    _create(client, ClusterRoleBinding.from_dict({
        "metadata": {"name": "kfp-kwok"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kwok"}]}))
    shape = kwok.NodeShape(opts.node_cpu, opts.node_memory, opts.node_pods)
    for i in range(1, opts.nodes + 1):
        _create(client, Node.from_dict(kwok.node_manifest(i, shape)))


def _start_controller_manager(c: Cluster, opts: Options, binary: Path) -> None:
    log = c.dir / "logs" / "kube-controller-manager.log"
    via = "kube-controller-manager" in opts.proxied()

    def start(port: int) -> int:
        argv = controller_manager.argv(binary, c.kubeconfig("controller-manager-via-proxy" if via else
                                                            "controller-manager"),
                                       c.dir / "pki", port, opts.controllers,
                                       feature_gates.flag(opts.feature_gates, "kube-controller-manager"),
                                       authentication_kubeconfig=c.kubeconfig("controller-manager"))
        return c.start("kube-controller-manager", argv, log)
    _on_a_free_port("kube-controller-manager", start,
                    lambda port: httpx.get(f"https://127.0.0.1:{port}/healthz", verify=False, timeout=1).text == "ok",
                    log, opts.timeout)
    say("  kube-controller-manager ready" + (" (through the proxy)" if via else ""))


def _start_kwok(c: Cluster, opts: Options, binary: Path) -> None:
    t0 = time.monotonic()
    workdir = private_dir(c.dir / "kwok")
    log = c.dir / "logs" / "kwok.log"

    def start(port: int) -> int:
        config = write_private(workdir / "kwok.yaml", kwok.configuration(build.kwok_stages(), f"127.0.0.1:{port}"))
        # KWOK_WORKDIR: KWOK reads no ~/.kwok of the user's; only this configuration.
        return c.start("kwok", [str(binary), f"--kubeconfig={c.kubeconfig('kwok')}", f"--config={config}"], log,
                       env={**os.environ, "KWOK_WORKDIR": str(workdir)})
    _on_a_free_port("kwok", start,
                    lambda port: httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200,
                    log, opts.timeout)
    count = kwok.wait_nodes_ready(c.admin_api(), opts.nodes, opts.timeout)
    if count < opts.nodes:
        raise ClusterError(f"only {count} of {opts.nodes} nodes became Ready and untainted after {opts.timeout:.0f}s "
                           f"(KWOK initialises them, kube-controller-manager lifts their not-ready taint); see {log} "
                           f"and {c.dir / 'logs' / 'kube-controller-manager.log'}:\n{_tail(log)}")
    say(f"  {opts.nodes} KWOK nodes Ready ({opts.node_cpu} cpu, {opts.node_memory}, {opts.node_pods} pods each; "
        f"{time.monotonic() - t0:.1f}s)")


def _start_proxy(c: Cluster, opts: Options) -> None:
    d = c.dir
    # Port 0: the proxy binds both ports itself and names them in its ready file (a port picked here and
    # released would be free only until someone else took it: a run beside other suites lost its
    # control port that way, "address already in use").
    args = ["--kubeconfig", str(c.kubeconfig("proxy-upstream")), "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0",
            "--profiles", str(opts.profiles_dir), "--journal", str(c.journal),
            "--confdir", str(d / "proxy-ca"), "--max-concurrent-streams", str(opts.proxy_max_streams)]
    if opts.profile:
        args += ["--profile", opts.profile]
    if c.scheduler_build:
        args += ["--scheduler-build", c.scheduler_build]
    try:
        served = start_serve(args, d / "proxy.json", c.log("kube-fault-proxy"), timeout=opts.timeout,
                             new_session=True)
    except ServeFailed as e:
        raise ClusterError(str(e)) from None
    c.record("kube-fault-proxy", served.pid, served.log)
    info = served.ready
    c.state.proxy = state.ProxyRecord(url=info["proxyUrl"], control=info["controlUrl"], ca_file=info["caFile"])
    proxy_ca = Path(info["caFile"]).read_bytes()
    kc = d / "kubeconfigs"
    for who in ("scheduler", "yunikorn", "admin", "controller-manager"):
        token = c.state.tokens[who]
        c.state.kubeconfigs[f"{who}-via-proxy"] = str(
            _write_yaml(kc / f"{who}-via-proxy.kubeconfig", _kubeconfig(info["proxyUrl"], proxy_ca, {"token": token})))
    say(f"  kube-fault-proxy on {info['proxyUrl']}, control plane {info['controlUrl']}")


def _scheduler_kubeconfig(c: Cluster, who: str) -> Path:
    component = "kube-scheduler" if who == "scheduler" else who
    return c.kubeconfig(f"{who}-via-proxy" if c.via_proxy(component) else who)


def _start_kube_scheduler(c: Cluster, opts: Options, binary: Path, announce: bool = True) -> None:
    config = c.dir / "kube-scheduler.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(_scheduler_kubeconfig(c, "scheduler")),
                             "contentType": "application/json", "qps": 500, "burst": 1000},
        "leaderElection": {"leaderElect": False}}))
    log = c.dir / "logs" / "kube-scheduler.log"

    def start(port: int) -> int:
        # A pod whose bind failed waits in kube-scheduler's unschedulable queue for up to 5 minutes by
        # default; 20 s keeps every run's horizon short (the flag is deprecated but still honoured).
        return c.start("kube-scheduler", [str(binary), f"--config={config}", "--bind-address=127.0.0.1",
                                          f"--secure-port={port}", "--pod-max-in-unschedulable-pods-duration=20s",
                                          *feature_gates.flag(opts.feature_gates, "kube-scheduler")], log)
    _on_a_free_port("kube-scheduler", start,
                    lambda port: httpx.get(f"https://127.0.0.1:{port}/readyz", verify=False, timeout=1).text == "ok",
                    log, opts.timeout)
    if announce:
        say("  kube-scheduler ready" + (" (through the proxy)" if c.via_proxy("kube-scheduler") else ""))


def _start_yunikorn(c: Cluster, opts: Options, binary: Path, announce: bool = True) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE_")}
    env.update(KUBECONFIG=str(_scheduler_kubeconfig(c, "yunikorn")), NAMESPACE=YUNIKORN_NAMESPACE)
    log = c.dir / "logs" / "yunikorn.log"
    pid = c.start("yunikorn", [str(binary)], log, env=env, cwd=c.dir)
    url = f"http://127.0.0.1:{YUNIKORN_PORT}"
    _wait("yunikorn", lambda: httpx.get(f"{url}/ws/v1/scheduler/healthcheck", timeout=1).status_code == 200,
          pid, log, opts.timeout)
    c.state.yunikorn = url
    if announce:
        say(f"  YuniKorn ready, REST on {url}" + (" (through the proxy)" if c.via_proxy("yunikorn") else ""))


# Stopped last, in this order: kube-apiserver shuts down cleanly only while etcd still answers, and
# its clients (schedulers, the proxy, KWOK, kube-controller-manager) go first so nothing reconnects.
LAST = ("kube-apiserver", "etcd")


def down(state_dir: Path, grace: float = 10.0) -> Stopped:
    """Stop every process group `up` started: the clients all at once, then kube-apiserver, then etcd;
    SIGTERM first, SIGKILL to what is left `grace` seconds later. Only the groups confirmed gone leave
    the state file, so a `down` that could not finish (or was interrupted) is finished by the next."""
    c = Cluster(state_dir)
    stopped = real_node.stop(c, grace)  # first: its pods go through the kubelet while the apiserver answers
    procs = c.state.processes
    groups = {name: p.pid for name, p in reversed(list(procs.items()))}
    tiers = [[n for n in groups if n not in LAST], *([n] for n in LAST if n in groups)]
    for tier in tiers:
        done = stop_groups({n: groups[n] for n in tier}, grace)
        stopped.terminated += done.terminated
        stopped.killed += done.killed
        stopped.survivors += done.survivors
    if c.file.exists():
        c.state.processes = {n: p for n, p in procs.items() if n in stopped.survivors}
        c.state.stopped_at = time.time()
        c.save()
    return stopped


def status(state_dir: Path) -> dict[str, Any]:
    """What is running, and where."""
    c = Cluster(state_dir)
    recorded = c.processes
    running = live_groups({p.pid for p in recorded.values()})
    procs = {name: {"pid": p.pid, "running": p.pid in running, "log": str(p.log)} for name, p in recorded.items()}
    doc = c.state.model_dump(mode="json", by_alias=True, include={
        "apiserver", "proxy", "scheduler", "scheduler_build", "feature_gates", "targets", "builds", "yunikorn",
        "nodes", "real_node", "kubeconfigs"})
    return {"stateDir": str(state_dir), "up": bool(procs) and all(p["running"] for p in procs.values()), **doc,
            "throughProxy": list(c.state.through_proxy or []), "processes": procs}


def env(state_dir: Path) -> str:
    """Shell exports for working with the cluster."""
    c = Cluster(state_dir)
    if not c.state.kubeconfigs:
        raise ClusterError(f"no cluster in {state_dir}: run `kube-fault-proxy cluster up`")
    lines = [f"export KUBECONFIG={c.kubeconfig('admin')}"]
    kubectl = build.kubernetes("kubectl", c.state.builds.get("kubectl", versions.KUBERNETES)).binary
    if kubectl.is_file():  # `up` builds it; a path that does not exist is never exported
        lines.append(f"export KFP_KUBECTL={kubectl}")
    if c.proxy is not None:
        lines += [f"export KFP_CONTROL_URL={c.proxy.control}",
                  f"export KFP_PROXY_KUBECONFIG={c.kubeconfig('admin-via-proxy')}"]
    if c.yunikorn_url is not None:
        lines.append(f"export KFP_YUNIKORN_URL={c.yunikorn_url}")
    return "\n".join(lines)
