"""`cluster up --real-node`: a real kubelet backed by containerd and runc beside the KWOK nodes.

Debian's containerd, runc, containernetworking-plugins and busybox-static are installed with apt when
missing (as root); the kubelet is built from k8s.io/kubernetes like the control plane. Its images are
made here from the static busybox (node_images.py) and imported into containerd: no registry is
reached. One real node per machine: its cgroups (`/kubepods` in each cgroup v1 hierarchy) and its
bridge are the machine's. `stop` (called by `cluster down`) deletes the node's pods through the
kubelet, stops the kubelet and containerd, and removes what they leave on the host: mounts under the
state directory, the kubepods cgroups, the bridge, the log links in /var/log/containers, and the
sysctls the kubelet sets (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops) and the bridge
plugin sets (net.ipv4.ip_forward), put back as they were.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import yaml

from kube_fault_proxy.paths import private_dir, write_private
from kube_fault_proxy.rig.cluster import build, host_sweep, kwok, node_images
from kube_fault_proxy.rig.cluster.processes import Stopped, free_port, live_groups, stop_groups
from kube_fault_proxy.rig.cluster.real_node_config import (
    BRIDGE,
    CNI_BIN,
    K8S_NAMESPACE,
    NODE_IP,
    NODE_NAME,
    POD_SUBNET,
    RUNC,
    Layout,
    cni_conflist,
    containerd_toml,
    data_dir,
    kubelet_configuration,
    node_certificate,
)
from kube_fault_proxy.rig.cluster.state import RealNodeRecord

if TYPE_CHECKING:
    from kube_fault_proxy.rig.cluster.record import Cluster

PACKAGES = {"containerd": Path("/usr/bin/containerd"), "runc": RUNC,
            "containernetworking-plugins": CNI_BIN / "bridge", "busybox-static": node_images.BUSYBOX}
SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops", "net/ipv4/ip_forward")
# Fixed paths whatever the state directory: containerd 1.6's shim sockets, fifos and runc's state
# (/run/containerd/{s,fifo,runc}), the kubelet's device-plugin socket (/var/lib/kubelet/device-plugins).
# `up` notes which existed; `down` removes the empty directories of those it made.
FIXED_DIRS = (Path("/run/containerd"), Path("/var/lib/kubelet"))


class RealNodeError(RuntimeError):
    """The real node could not be set up or started; the message names the step, the error and the log."""


def kubelet() -> build.Component:
    """The kubelet, from k8s.io/kubernetes at the control plane's version."""
    return build.kubernetes("kubelet")


def apiserver_flags(pki: Path) -> list[str]:
    """What kube-apiserver needs to reach the kubelet for logs and exec: the node's InternalIP (its name
    resolves nowhere) and the admin client certificate, which the kubelet's x509 authentication accepts."""
    return ["--kubelet-preferred-address-types=InternalIP,Hostname",
            f"--kubelet-client-certificate={pki / 'admin.crt'}", f"--kubelet-client-key={pki / 'admin.key'}"]


def missing_packages() -> list[str]:
    """The Debian packages whose files the real node needs and this machine lacks."""
    return [name for name, path in PACKAGES.items() if not path.exists()]


def install() -> Path:
    """Install the Debian packages (apt, as root) if missing and build the kubelet; the kubelet's path."""
    missing = missing_packages()
    if missing:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            raise RealNodeError(f"the real node needs Debian's {' '.join(missing)} (apt-get install, as root)")
        _run(["apt-get", "update", "-qq"], "apt-get update")
        _run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], "apt-get install",
             env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    return build.build(kubelet())


def _run(argv: list[str], what: str, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    if r.returncode != 0:
        raise RealNodeError(f"{what} failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-2000:]}")
    return r.stdout


def _ctr(layout: Layout, *args: str, timeout: float = 60) -> str:
    return _run(["ctr", "--address", str(layout.socket), "--namespace", K8S_NAMESPACE, *args],
                f"ctr {' '.join(args[:2])}", timeout=timeout)


def _kubepods_busy() -> bool:
    """Whether a kubelet's /kubepods cgroup on this machine still holds processes."""
    tasks = host_sweep.CGROUPS / "pids" / host_sweep.KUBEPODS
    return tasks.is_dir() and any(f.read_text().strip() for f in tasks.rglob("cgroup.procs"))


def host_sysctls() -> dict[str, str]:
    """The sysctls the kubelet and the CNI bridge may change, as they are now."""
    return {k: (Path("/proc/sys") / k).read_text().strip() for k in SYSCTLS}


def preflight() -> None:
    """Refuse early what cannot work: not root (containerd, cgroups, mounts, the bridge), or a real node's
    pods still running on this machine (one real node at a time)."""
    if os.geteuid() != 0:
        raise RealNodeError("--real-node needs root: containerd, the kubelet's cgroups, mounts and the CNI bridge")
    if _kubepods_busy():
        raise RealNodeError(f"{host_sweep.CGROUPS / 'pids' / host_sweep.KUBEPODS} holds processes: another real "
                            "node runs on this machine (one at a time); `cluster down` it first")


def start(c: Cluster, timeout: float, say: Any) -> None:
    """Set up containerd and the kubelet for the cluster `c` and wait until the node is Ready."""
    preflight()
    t0 = time.monotonic()
    binary = install()
    host_sweep.sweep_cgroups()  # left by a run that was killed before its `down`
    data = data_dir(c.dir)
    if data.exists() and not host_sweep.mounts_under(data):  # left by a run killed before its `down`
        shutil.rmtree(data)
    layout = Layout(private_dir(c.dir / "real-node"), private_dir(data))
    c.state.real_node = RealNodeRecord(dir=str(layout.root), data=str(layout.data), node=NODE_NAME,
                                       sysctls=host_sysctls(), chains=sorted(host_sweep.kube_chains()),
                                       socket=str(layout.socket),
                                       made_dirs=[str(d) for d in FIXED_DIRS if not d.exists()])
    info = c.state.real_node
    c.save()
    busybox = node_images.BUSYBOX.read_bytes()
    pause, workload = node_images.images(node_images.busybox_tag(busybox))
    for d in (layout.containerd_root, layout.containerd_state, layout.cni_conf, layout.ipam, layout.kubelet_root,
              layout.pod_logs, layout.containerd_config.parent):
        d.mkdir(parents=True, exist_ok=True)
    layout.containerd_config.write_text(containerd_toml(layout, pause.name))
    (layout.cni_conf / "10-kfp-real-node.conflist").write_text(json.dumps(cni_conflist(layout), indent=2))
    layout.images.write_bytes(node_images.oci_archive(busybox, (pause, workload)))

    log = c.log("containerd")
    pid = c.start("containerd", ["containerd", "--config", str(layout.containerd_config)], log)
    _until("containerd", lambda: subprocess.run(
        ["ctr", "--address", str(layout.socket), "version"], capture_output=True, timeout=5).returncode == 0,
           pid, log, timeout)
    _ctr(layout, "images", "import", str(layout.images))
    info.images = {"sandbox": pause.name, "workload": workload.name}

    pki = c.dir / "pki"
    cert, key = node_certificate((pki / "ca.crt").read_bytes(), (pki / "ca.key").read_bytes())
    write_private(layout.root / "kubelet.crt", cert)
    write_private(layout.root / "kubelet.key", key)
    write_private(layout.kubeconfig, yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "kfp",
        "clusters": [{"name": "kfp", "cluster": {"server": c.apiserver, "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": "kfp", "user": {"client-certificate": str(layout.root / "kubelet.crt"),
                                           "client-key": str(layout.root / "kubelet.key")}}],
        "contexts": [{"name": "kfp", "context": {"cluster": "kfp", "user": "kfp"}}]}, sort_keys=False))
    port, healthz = free_port(), free_port()
    write_private(layout.kubelet_config, yaml.safe_dump(kubelet_configuration(
        layout, pki / "ca.crt", port, healthz, f"unix://{layout.socket}"), sort_keys=False))
    _bind_node_role(c)
    _make_bridge()
    log = c.log("kubelet")
    pid = c.start("kubelet", [str(binary), f"--config={layout.kubelet_config}", f"--kubeconfig={layout.kubeconfig}",
                              f"--root-dir={layout.kubelet_root}", f"--cert-dir={layout.kubelet_root / 'pki'}",
                              f"--hostname-override={NODE_NAME}", f"--node-ip={NODE_IP}",
                              "--node-labels=type=real", "--v=1"], log)
    _until("kubelet", lambda: httpx.get(f"http://127.0.0.1:{healthz}/healthz", timeout=1).text == "ok",
           pid, log, timeout)
    _until(f"node {NODE_NAME} Ready", lambda: _node_ready(c), pid, log, timeout)
    info.kubelet_port = port
    c.save()
    say(f"  real node {NODE_NAME} Ready: kubelet {kubelet().version}, containerd and runc "
        f"(images {workload.name}, sandbox {pause.name}; {time.monotonic() - t0:.1f}s)")


def _make_bridge() -> None:
    """The CNI bridge with the gateway address, which is also the node's (NODE_IP)."""
    prefix = POD_SUBNET.split("/")[1]
    if not Path("/sys/class/net", BRIDGE).exists():
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"], f"ip link add {BRIDGE}")
    addresses = _run(["ip", "-4", "-o", "addr", "show", "dev", BRIDGE], "ip addr show")
    if f" {NODE_IP}/" not in addresses:
        _run(["ip", "addr", "add", f"{NODE_IP}/{prefix}", "dev", BRIDGE], f"ip addr add {NODE_IP}")
    _run(["ip", "link", "set", BRIDGE, "up"], f"ip link set {BRIDGE} up")


def _bind_node_role(c: Cluster) -> None:
    """The kubelet's user gets the bootstrap `system:node` ClusterRole (the rig's apiserver runs RBAC only)."""
    from lightkube.resources.rbac_authorization_v1 import ClusterRoleBinding

    from kube_fault_proxy.kube.kubeapi import ApiError

    binding: Any = ClusterRoleBinding.from_dict({
        "metadata": {"name": "kfp-real-node"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": f"system:node:{NODE_NAME}"}]})
    with c.admin_api().client() as client:
        try:
            client.create(binding)
        except ApiError as e:
            if e.status.code != 409:
                raise


def _node_ready(c: Cluster) -> bool:
    from kube_fault_proxy.kube.kubeapi import ApiError, Node

    with c.admin_api().client() as client:
        try:
            node: Any = client.get(Node, NODE_NAME)
        except ApiError:
            return False
    return kwok.ready(node.to_dict())


def _until(what: str, check: Any, pid: int, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = "never ready"
    while time.monotonic() < deadline:
        if not live_groups({pid}):
            raise RealNodeError(f"{what}: exited during startup; see {log}:\n{_tail(log)}")
        try:
            if check():
                return
            last = "not ready yet"
        except (httpx.HTTPError, OSError, subprocess.SubprocessError) as e:
            last = f"{type(e).__name__}: {e}"
        time.sleep(0.2)
    raise RealNodeError(f"{what}: not ready after {timeout:.0f}s ({last}); see {log}:\n{_tail(log)}")


def _tail(log: Path, lines: int = 20) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    return ""


def stop(c: Cluster, grace: float = 10.0) -> Stopped:
    """Stop the real node and leave the host as it was: its pods deleted through the kubelet (so each
    sandbox's network is torn down by CNI), the kubelet, any container left, containerd, then the sweep.

    What the sweep could not remove is kept in the state file (`realNode.leftovers`) and printed."""
    info = c.state.real_node
    stopped = Stopped()
    if info is None or info.stopped_at is not None:
        return stopped
    layout = Layout(Path(info.dir), Path(info.data))
    procs = c.state.processes
    running = live_groups({p.pid for p in procs.values()})
    up = {name: procs[name].pid for name in ("kubelet", "containerd") if name in procs and procs[name].pid in running}
    api_up = "kube-apiserver" in procs and procs["kube-apiserver"].pid in running
    if "kubelet" in up and "containerd" in up and api_up:
        with contextlib.suppress(Exception):  # best effort: the sweep below removes whatever stays
            _drain(c, layout, timeout=30)
    for name in ("kubelet", "containerd"):
        if name == "containerd" and name in up:
            _remove_tasks(layout)
        if name in up:
            done = stop_groups({name: up[name]}, grace)
            stopped.terminated += done.terminated
            stopped.killed += done.killed
            stopped.survivors += done.survivors
    host_sweep.kill_shims(layout)
    leftovers = [*host_sweep.unmount(layout.data), *host_sweep.sweep_cgroups(), *host_sweep.delete_bridge(),
                 *host_sweep.restore_sysctls(info.sysctls),
                 # the kubelet's iptables chains (its canary, KUBE-FIREWALL): those that were not there before
                 *host_sweep.remove_chains(host_sweep.kube_chains() - set(info.chains))]
    host_sweep.remove_log_links(layout)
    for made in info.made_dirs:
        leftovers += host_sweep.remove_made_dir(Path(made))
    layout.images.unlink(missing_ok=True)
    if not host_sweep.mounts_under(layout.data):  # never delete through a mount that is still there
        shutil.rmtree(layout.data, ignore_errors=True)
    if layout.data.exists():
        leftovers.append(f"directory {layout.data}")
    for name in ("kubelet", "containerd"):
        if name not in stopped.survivors:
            procs.pop(name, None)
    info.stopped_at = time.time()
    info.leftovers = leftovers
    c.save()
    if leftovers:
        print("kube-fault-proxy cluster: the real node left behind: " + "; ".join(leftovers), file=sys.stderr)
    return stopped


def _drain(c: Cluster, layout: Layout, timeout: float) -> None:
    """Delete every pod bound to the node (1 s grace) and wait until the kubelet has removed them all."""
    from kube_fault_proxy.kube.kubeapi import Pod

    deadline = time.monotonic() + timeout
    with c.admin_api().client() as client:
        pod: Any
        for pod in client.list(Pod, namespace="*", fields={"spec.nodeName": NODE_NAME}):
            with contextlib.suppress(Exception):
                client.delete(Pod, pod.metadata.name, namespace=pod.metadata.namespace, grace_period=1)
        while time.monotonic() < deadline:
            pods = list(client.list(Pod, namespace="*", fields={"spec.nodeName": NODE_NAME}))
            if not pods and not _ctr(layout, "tasks", "ls", "-q").split():
                return
            time.sleep(0.3)


def _remove_tasks(layout: Layout) -> None:
    """SIGKILL and delete every container task containerd still runs, then the containers."""
    with contextlib.suppress(RealNodeError, subprocess.SubprocessError):
        for task in _ctr(layout, "tasks", "ls", "-q").split():
            with contextlib.suppress(RealNodeError):
                _ctr(layout, "tasks", "kill", "--signal", "SIGKILL", task)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            tasks = _ctr(layout, "tasks", "ls", "-q").split()
            for task in tasks:
                with contextlib.suppress(RealNodeError):
                    _ctr(layout, "tasks", "delete", "--force", task)
            if not _ctr(layout, "tasks", "ls", "-q").split():
                break
            time.sleep(0.2)
        for container in _ctr(layout, "containers", "ls", "-q").split():
            with contextlib.suppress(RealNodeError):
                _ctr(layout, "containers", "delete", container)
