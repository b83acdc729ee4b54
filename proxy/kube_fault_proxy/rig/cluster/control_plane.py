"""`cluster up|down|status|env`: the bring-up sequence of a local control plane. etcd, kube-apiserver,
kube-controller-manager, fake nodes run by KWOK, and optionally kube-fault-proxy and a scheduler whose kubeconfig
points at it, started in that order and stopped in reverse. Each component's lifecycle is a module of its own
(etcd.py, apiserver.py, controller_manager.py, kwok.py, front_proxy.py, schedulers.py); the record they all
read and write is record.py."""

from __future__ import annotations

import contextlib
import secrets
import shutil
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightkube import Client
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from kube_fault_proxy import shipped
from kube_fault_proxy.kube.kubeapi import ApiError, Node, ensure_namespace
from kube_fault_proxy.paths import write_private
from kube_fault_proxy.rig.cluster import (
    apiserver,
    build,
    controller_manager,
    etcd,
    feature_gates,
    front_proxy,
    kubeconfigs,
    kwok,
    pki,
    real_node,
    schedulers,
    state,
    versions,
)
from kube_fault_proxy.rig.cluster.processes import Stopped, live_groups, port_in_use, stop_groups
from kube_fault_proxy.rig.cluster.record import Cluster, ClusterError
from kube_fault_proxy.rig.cluster.schedulers import (
    SCHEDULER_BINARIES,
    SCHEDULERS,
    YUNIKORN_NAMESPACE,
    YUNIKORN_PORT,
    scheduler_build,
)
from kube_fault_proxy.rig.cluster.startup import say

# Clients whose kubeconfig may point at the proxy (`--through-proxy`); by default the scheduler alone.
THROUGH_PROXY = ("kube-scheduler", "yunikorn", "kube-controller-manager")


# Token users: (name, ',"groups"'). Only the admin is in system:masters; API Priority and Fairness
# applies to every other one, as to a cluster's components.
USERS = {"admin": ("kfp-admin", ",system:masters"), "scheduler": ("system:kube-scheduler", ""),
         "yunikorn": ("yunikorn", ""), "controller-manager": ("system:kube-controller-manager", ""),
         "kwok": ("kwok", "")}


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
    # With scheduler kube-scheduler: its release (`kubernetes`) with this patch (build.kube_scheduler).
    kube_scheduler_patch: Path | None = None
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
    if opts.kube_scheduler_patch and opts.scheduler != "kube-scheduler":
        raise build.BuildInputError("--kube-scheduler-patch needs --scheduler kube-scheduler")
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
    if opts.kube_scheduler_patch is not None:  # its own build (name and hash), never the released binary
        components["kube-scheduler"] = build.kube_scheduler(opts.kube_scheduler_patch, opts.kubernetes)
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
        scheduler_variant=components[SCHEDULER_BINARIES[opts.scheduler]].variant
        if opts.scheduler in SCHEDULER_BINARIES else None,
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
    """The sequence: etcd and kube-apiserver, the kubeconfigs, kube-controller-manager, the nodes, the proxy
    (before kube-controller-manager when it goes through it), the scheduler."""
    certs = pki.make(c.dir / "pki")
    _write_tokens(c)
    t0 = time.monotonic()
    etcd_url = etcd.start(c, binaries["etcd"], opts.timeout)
    extra = [*feature_gates.flag(opts.feature_gates, "kube-apiserver"),
             *([f"--runtime-config={','.join(opts.runtime_config)}"] if opts.runtime_config else []),
             *(real_node.apiserver_flags(certs) if opts.real_node else [])]
    server = apiserver.start(c, binaries["kube-apiserver"], etcd_url, certs, opts.apiserver_max_streams, extra,
                             opts.timeout)
    say(f"  etcd and kube-apiserver ready on {server} ({time.monotonic() - t0:.1f}s)")
    _write_kubeconfigs(c, server, certs)
    # A kube-controller-manager under test goes through the proxy, which must be there first; otherwise the
    # proxy starts once the nodes are Ready, as it always has.
    kcm_proxied = "kube-controller-manager" in opts.proxied()
    if kcm_proxied:
        _start_proxy(c, opts)
    controller_manager.start(c, binaries["kube-controller-manager"], opts.controllers,
                             feature_gates.flag(opts.feature_gates, "kube-controller-manager"), kcm_proxied,
                             opts.timeout)
    with c.admin_api().client() as client:
        _seed_objects(client, opts)
    kwok.start(c, binaries["kwok"], opts.nodes, kwok.NodeShape(opts.node_cpu, opts.node_memory, opts.node_pods),
               opts.timeout)
    if opts.real_node:
        try:
            real_node.start(c, opts.timeout, say)
        except real_node.RealNodeError as e:
            raise ClusterError(str(e)) from None
    if opts.proxy and not kcm_proxied:
        _start_proxy(c, opts)
    schedulers.start(c, binaries, opts.feature_gates, opts.timeout)
    c.save()


def _write_tokens(c: Cluster) -> None:
    """A bearer token for each of USERS, in the apiserver's token file and in the state."""
    tokens = {name: secrets.token_hex(16) for name in USERS}
    write_private(c.dir / "tokens.csv", "".join(f"{tokens[who]},{user},kfp-{who}{groups}\n"
                                                for who, (user, groups) in USERS.items()))
    c.state.tokens = tokens


def _write_kubeconfigs(c: Cluster, server: str, certs: Path) -> None:
    """A kubeconfig straight to the apiserver for each client (the proxy's own are written when it starts)."""
    tokens = c.state.tokens
    kc = c.dir / "kubeconfigs"
    kc.mkdir(exist_ok=True)
    users: dict[str, dict[str, str]] = {
        "admin": {"token": tokens["admin"]},
        "admin-cert": {"client-certificate": str(certs / "admin.crt"), "client-key": str(certs / "admin.key")},
        **{who: {"token": tokens[who]} for who in ("scheduler", "yunikorn", "controller-manager", "kwok")},
        "proxy-upstream": {},  # the proxy's own credentials come with each request it relays
    }
    c.state.kubeconfigs = {name: str(kubeconfigs.write(kc / f"{name}.kubeconfig", server, certs / "ca.crt", user))
                           for name, user in users.items()}
    c.save()


def _start_proxy(c: Cluster, opts: Options) -> None:
    front_proxy.start(c, opts.profiles_dir, opts.profile, opts.proxy_max_streams, opts.timeout)


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
