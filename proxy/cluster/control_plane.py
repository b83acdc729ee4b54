"""`cluster up|down|status|env`: etcd, kube-apiserver, fake nodes, a kubelet stand-in, and
optionally kube-fault-proxy and a scheduler whose kubeconfig points at it."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml
from lightkube import Client
from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

from proxy import paths
from proxy.cluster import build, pki
from proxy.cluster.kubeapi import ApiError, HTTPError, Kube, Node, ensure_namespace
from proxy.cluster.processes import alive, free_port, group_alive, port_in_use, spawn, stop
from proxy.paths import private_dir, write_private

SCHEDULERS = ("none", "kube-scheduler", "yunikorn")
YUNIKORN_PORT = 9080
YUNIKORN_NAMESPACE = "yunikorn"


class ClusterError(RuntimeError):
    """Startup failed; the message names the component and its log file."""


@dataclass(frozen=True)
class Options:
    """What `cluster up` starts."""

    state_dir: Path
    nodes: int = 50
    scheduler: str = "none"
    proxy: bool = False
    profile: str | None = None
    profiles_dir: Path = Path("fault_profiles")
    timeout: float = 120.0
    node_cpu: str = "16"
    node_memory: str = "64Gi"
    node_pods: int = 110
    # kube-apiserver's --http2-max-streams-per-connection (0: its default, 100) and the proxy's
    # advertised limit. The same in both, so direct and proxied runs dial alike (README).
    apiserver_max_streams: int = 4096
    proxy_max_streams: int = 4096
    # With scheduler yunikorn: v1.9.0 with this patch, or this yunikorn-k8shim checkout (build.yunikorn).
    yunikorn_patch: Path | None = None
    yunikorn_source: Path | None = None


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


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class Cluster:
    """The state of one local control plane, kept in <state_dir>/cluster.json."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir
        self.file = state_dir / "cluster.json"
        self.state: dict[str, Any] = json.loads(self.file.read_text()) if self.file.exists() else {}

    def save(self) -> None:
        """Persist after every started process, so `down` can always find it (0600: it holds tokens)."""
        private_dir(self.dir)
        write_private(self.file, json.dumps(self.state, indent=2))

    def record(self, name: str, pid: int, log: Path) -> None:
        """Remember a started process."""
        self.state.setdefault("processes", {})[name] = {"pid": pid, "log": str(log)}
        self.save()

    def kubeconfig(self, name: str) -> Path:
        """One of the kubeconfigs `up` wrote."""
        return Path(self.state["kubeconfigs"][name])

    def admin_api(self) -> Kube:
        """The admin token, straight to the apiserver."""
        return Kube.from_token(self.state["apiserver"], self.state["tokens"]["admin"], self.dir / "pki" / "ca.crt")


def say(msg: str) -> None:
    """Progress on stderr."""
    print(msg, file=sys.stderr, flush=True)


def up(opts: Options) -> Cluster:
    """Start everything asked for; on any failure stop what was started and raise ClusterError."""
    if opts.scheduler not in SCHEDULERS:
        raise ClusterError(f"--scheduler must be one of {', '.join(SCHEDULERS)}")
    existing = Cluster(opts.state_dir)
    if any(alive(p["pid"]) for p in existing.state.get("processes", {}).values()):
        raise ClusterError(f"a cluster is already running from {opts.state_dir}: run `cluster down` first")
    if (opts.yunikorn_patch or opts.yunikorn_source) and opts.scheduler != "yunikorn":
        raise build.BuildInputError("--yunikorn-patch and --yunikorn-source need --scheduler yunikorn")
    if opts.scheduler == "yunikorn" and port_in_use(YUNIKORN_PORT, "0.0.0.0"):
        raise ClusterError(f"port {YUNIKORN_PORT} is in use: YuniKorn's REST port is fixed (another YuniKorn?)")
    scheduler_binary = {"kube-scheduler": ["kube-scheduler"], "yunikorn": ["yunikorn-scheduler"]}
    needed = ["etcd", "kube-apiserver", *scheduler_binary.get(opts.scheduler, [])]
    components = {**build.ALL, "yunikorn-scheduler": build.yunikorn(opts.yunikorn_patch, opts.yunikorn_source)}
    binaries = build.build_all(needed, overrides=components)
    shutil.rmtree(opts.state_dir, ignore_errors=True)
    c = Cluster(opts.state_dir)
    c.state = {"startedAt": time.time(), "scheduler": opts.scheduler, "nodes": opts.nodes,
               "builds": {n: components[n].version for n in needed},
               "schedulerBuild": scheduler_build(opts.scheduler, components),
               "schedulerVariant": components["yunikorn-scheduler"].variant if opts.scheduler == "yunikorn" else None,
               "apiserverMaxStreams": opts.apiserver_max_streams,
               "proxyMaxStreams": opts.proxy_max_streams if opts.proxy else None}
    c.save()
    try:
        _start(c, opts, binaries)
    except BaseException:
        down(opts.state_dir)
        raise
    return c


def scheduler_build(scheduler: str, components: dict[str, build.Component]) -> str | None:
    """The scheduler's exact build, e.g. `yunikorn v1.9.0+3355-forget-pod-reverts-1a2b3c4d5e6f`."""
    binary = {"kube-scheduler": "kube-scheduler", "yunikorn": "yunikorn-scheduler"}.get(scheduler)
    return f"{scheduler} {components[binary].version}" if binary else None


def _start(c: Cluster, opts: Options, binaries: dict[str, Path]) -> None:
    d = c.dir
    logs = d / "logs"
    certs = pki.make(d / "pki")
    tokens = {name: secrets.token_hex(16) for name in ("admin", "scheduler", "yunikorn")}
    write_private(d / "tokens.csv",
                  f"{tokens['admin']},kfp-admin,kfp-admin,system:masters\n"
                  f"{tokens['scheduler']},system:kube-scheduler,kfp-scheduler\n"
                  f"{tokens['yunikorn']},yunikorn,kfp-yunikorn\n")
    admin_token = write_private(d / "admin.token", tokens["admin"])  # for processes: never on argv
    c.state["tokens"] = tokens

    t0 = time.monotonic()
    etcd_port, peer_port = free_port(), free_port()
    etcd_url = f"http://127.0.0.1:{etcd_port}"
    log = logs / "etcd.log"
    pid = spawn([str(binaries["etcd"]), "--name", "kfp", "--data-dir", str(d / "etcd"),
                 "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
                 "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
                 "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
                 "--initial-cluster", f"kfp=http://127.0.0.1:{peer_port}", "--unsafe-no-fsync",
                 "--log-level", "warn"], log)
    c.record("etcd", pid, log)
    _wait("etcd", lambda: httpx.get(f"{etcd_url}/health", timeout=1).status_code == 200, pid, log, opts.timeout)

    api_port = free_port()
    server = f"https://127.0.0.1:{api_port}"
    log = logs / "kube-apiserver.log"
    pid = spawn([str(binaries["kube-apiserver"]), f"--etcd-servers={etcd_url}", "--bind-address=127.0.0.1",
                 f"--secure-port={api_port}", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
                 f"--tls-cert-file={certs / 'apiserver.crt'}", f"--tls-private-key-file={certs / 'apiserver.key'}",
                 f"--client-ca-file={certs / 'ca.crt'}", f"--token-auth-file={d / 'tokens.csv'}",
                 "--authorization-mode=RBAC", "--service-account-issuer=https://kubernetes.default.svc",
                 f"--service-account-key-file={certs / 'sa.pub'}",
                 f"--service-account-signing-key-file={certs / 'sa.key'}",
                 "--service-cluster-ip-range=10.0.0.0/24",
                 "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
                 f"--http2-max-streams-per-connection={opts.apiserver_max_streams}"], log)
    c.record("kube-apiserver", pid, log)
    c.state["apiserver"] = server
    api = c.admin_api()
    _wait("kube-apiserver", api.ready, pid, log, opts.timeout)
    say(f"  etcd and kube-apiserver ready on {server} ({time.monotonic() - t0:.1f}s)")

    ca = certs / "ca.crt"
    kc = d / "kubeconfigs"
    kc.mkdir(exist_ok=True)
    c.state["kubeconfigs"] = {
        "admin": str(_write_yaml(kc / "admin.kubeconfig", _kubeconfig(server, ca, {"token": tokens["admin"]}))),
        "admin-cert": str(_write_yaml(kc / "admin-cert.kubeconfig", _kubeconfig(
            server, ca, {"client-certificate": str(certs / "admin.crt"), "client-key": str(certs / "admin.key")}))),
        "scheduler": str(_write_yaml(kc / "scheduler.kubeconfig",
                                     _kubeconfig(server, ca, {"token": tokens["scheduler"]}))),
        "yunikorn": str(_write_yaml(kc / "yunikorn.kubeconfig",
                                    _kubeconfig(server, ca, {"token": tokens["yunikorn"]}))),
        "proxy-upstream": str(_write_yaml(kc / "proxy-upstream.kubeconfig", _kubeconfig(server, ca, {}))),
    }
    c.save()
    with api.client() as client:
        _seed_objects(client, opts)
    say(f"  {opts.nodes} nodes created ({opts.node_cpu} cpu, {opts.node_memory}, {opts.node_pods} pods each)")

    log = logs / "kubelet-stand-in.log"
    pid = spawn([sys.executable, "-m", "proxy.cluster.kubelet", "--server", server,
                 "--token-file", str(admin_token), "--ca", str(ca)], log)
    c.record("kubelet-stand-in", pid, log)

    if opts.proxy:
        _start_proxy(c, opts)
    _start_scheduler(c, opts, binaries)
    c.save()


SCHEDULER_BINARIES = {"kube-scheduler": "kube-scheduler", "yunikorn": "yunikorn-scheduler"}


def _start_scheduler(c: Cluster, opts: Options, binaries: dict[str, Path], announce: bool = True) -> None:
    binary = SCHEDULER_BINARIES.get(opts.scheduler)
    if binary is None:
        return
    c.state["schedulerBinary"] = str(binaries[binary])
    start = _start_kube_scheduler if opts.scheduler == "kube-scheduler" else _start_yunikorn
    start(c, opts, binaries[binary], announce=announce)


def restart_scheduler(c: Cluster, timeout: float = 120.0) -> float:
    """Stop the scheduler and start the same build again (patched or not), against the same
    apiserver and proxy; returns the seconds it took.

    For cases that must not inherit a scheduler's memory of the previous one (a fault matrix cell,
    a search trial): etcd, the apiserver and the proxy stay up; the scheduler starts from a relist
    with an empty cache."""
    t0 = time.monotonic()
    scheduler = c.state.get("scheduler")
    binary = SCHEDULER_BINARIES.get(str(scheduler))
    if binary is None or "schedulerBinary" not in c.state:
        raise ClusterError(f"no scheduler to restart in {c.dir}")
    proc = c.state.get("processes", {}).pop(scheduler, None)
    if proc is not None:
        stop(int(proc["pid"]), timeout=5.0)
    if scheduler == "yunikorn":
        deadline = time.monotonic() + timeout
        while port_in_use(YUNIKORN_PORT, "0.0.0.0"):  # the old process's REST port, until it is gone
            if time.monotonic() > deadline:
                raise ClusterError(f"port {YUNIKORN_PORT} still in use {timeout:g}s after stopping YuniKorn")
            time.sleep(0.2)
    opts = Options(state_dir=c.dir, nodes=int(c.state.get("nodes", 0)), scheduler=str(scheduler),
                   proxy="proxy" in c.state, timeout=timeout)
    _start_scheduler(c, opts, {binary: Path(c.state["schedulerBinary"])}, announce=False)
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
    resources = {"cpu": opts.node_cpu, "memory": opts.node_memory, "pods": str(opts.node_pods)}
    for i in range(1, opts.nodes + 1):
        name = f"kfp-node-{i:04d}"
        _create(client, Node.from_dict({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                                  "type": "kfp-fake"}},
            "status": {"capacity": resources, "allocatable": resources,
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "kube-fault-proxy fake node"}]}}))


def _start_proxy(c: Cluster, opts: Options) -> None:
    d = c.dir
    ready = d / "proxy.json"
    log = d / "logs" / "kube-fault-proxy.log"
    argv = [sys.executable, "-m", "proxy", "serve", "--kubeconfig", str(c.kubeconfig("proxy-upstream")),
            "--listen", f"127.0.0.1:{free_port()}", "--control", f"127.0.0.1:{free_port()}",
            "--profiles", str(opts.profiles_dir), "--journal", str(d / "journal.jsonl"),
            "--confdir", str(d / "proxy-ca"), "--ready-file", str(ready),
            "--max-concurrent-streams", str(opts.proxy_max_streams)]
    if opts.profile:
        argv += ["--profile", opts.profile]
    if c.state.get("schedulerBuild"):
        argv += ["--scheduler-build", c.state["schedulerBuild"]]
    pid = spawn(argv, log)
    c.record("kube-fault-proxy", pid, log)
    _wait("kube-fault-proxy", ready.exists, pid, log, opts.timeout)
    info = json.loads(ready.read_text())
    c.state["proxy"] = {"url": info["proxyUrl"], "control": info["controlUrl"], "caFile": info["caFile"]}
    proxy_ca = Path(info["caFile"]).read_bytes()
    kc = d / "kubeconfigs"
    for who in ("scheduler", "yunikorn", "admin"):
        token = c.state["tokens"][who]
        c.state["kubeconfigs"][f"{who}-via-proxy"] = str(
            _write_yaml(kc / f"{who}-via-proxy.kubeconfig", _kubeconfig(info["proxyUrl"], proxy_ca, {"token": token})))
    say(f"  kube-fault-proxy on {info['proxyUrl']}, control plane {info['controlUrl']}")


def _scheduler_kubeconfig(c: Cluster, who: str) -> Path:
    return c.kubeconfig(f"{who}-via-proxy" if "proxy" in c.state else who)


def _start_kube_scheduler(c: Cluster, opts: Options, binary: Path, announce: bool = True) -> None:
    port = free_port()
    config = c.dir / "kube-scheduler.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(_scheduler_kubeconfig(c, "scheduler")),
                             "contentType": "application/json", "qps": 500, "burst": 1000},
        "leaderElection": {"leaderElect": False}}))
    log = c.dir / "logs" / "kube-scheduler.log"
    # A pod whose bind failed waits in kube-scheduler's unschedulable queue for up to 5 minutes by
    # default; 20 s keeps every run's horizon short (the flag is deprecated but still honoured).
    pid = spawn([str(binary), f"--config={config}", "--bind-address=127.0.0.1", f"--secure-port={port}",
                 "--pod-max-in-unschedulable-pods-duration=20s"], log)
    c.record("kube-scheduler", pid, log)
    _wait("kube-scheduler", lambda: httpx.get(f"https://127.0.0.1:{port}/readyz", verify=False, timeout=1).text == "ok",
          pid, log, opts.timeout)
    if announce:
        say("  kube-scheduler ready" + (" (through the proxy)" if "proxy" in c.state else ""))


def _start_yunikorn(c: Cluster, opts: Options, binary: Path, announce: bool = True) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_SERVICE_")}
    env.update(KUBECONFIG=str(_scheduler_kubeconfig(c, "yunikorn")), NAMESPACE=YUNIKORN_NAMESPACE)
    log = c.dir / "logs" / "yunikorn.log"
    pid = spawn([str(binary)], log, env=env, cwd=c.dir)
    c.record("yunikorn", pid, log)
    url = f"http://127.0.0.1:{YUNIKORN_PORT}"
    _wait("yunikorn", lambda: httpx.get(f"{url}/ws/v1/scheduler/healthcheck", timeout=1).status_code == 200,
          pid, log, opts.timeout)
    c.state["yunikorn"] = url
    if announce:
        say(f"  YuniKorn ready, REST on {url}" + (" (through the proxy)" if "proxy" in c.state else ""))


def down(state_dir: Path) -> list[str]:
    """Stop every process `up` started, newest first; returns their names."""
    c = Cluster(state_dir)
    stopped = []
    for name, proc in reversed(list(c.state.get("processes", {}).items())):
        pid = int(proc["pid"])
        if alive(pid) or group_alive(pid):
            stop(pid)
            stopped.append(name)
    if c.state:
        c.state["processes"] = {}
        c.state["stoppedAt"] = time.time()
        c.save()
    return stopped


def status(state_dir: Path) -> dict[str, Any]:
    """What is running, and where."""
    c = Cluster(state_dir)
    procs = {name: {"pid": p["pid"], "running": alive(int(p["pid"])), "log": p["log"]}
             for name, p in c.state.get("processes", {}).items()}
    return {"stateDir": str(state_dir), "up": bool(procs) and all(p["running"] for p in procs.values()),
            "apiserver": c.state.get("apiserver"), "proxy": c.state.get("proxy"),
            "scheduler": c.state.get("scheduler"), "schedulerBuild": c.state.get("schedulerBuild"),
            "builds": c.state.get("builds"), "yunikorn": c.state.get("yunikorn"),
            "nodes": c.state.get("nodes"), "processes": procs, "kubeconfigs": c.state.get("kubeconfigs", {})}


def env(state_dir: Path) -> str:
    """Shell exports for working with the cluster."""
    c = Cluster(state_dir)
    if not c.state.get("kubeconfigs"):
        raise ClusterError(f"no cluster in {state_dir}: run `kube-fault-proxy cluster up`")
    lines = [f"export KUBECONFIG={c.kubeconfig('admin')}",
             f"export KFP_KUBECTL={build.kubernetes('kubectl').binary}"]
    if "proxy" in c.state:
        lines += [f"export KFP_CONTROL_URL={c.state['proxy']['control']}",
                  f"export KFP_PROXY_KUBECONFIG={c.kubeconfig('admin-via-proxy')}"]
    if "yunikorn" in c.state:
        lines.append(f"export KFP_YUNIKORN_URL={c.state['yunikorn']}")
    return "\n".join(lines)
