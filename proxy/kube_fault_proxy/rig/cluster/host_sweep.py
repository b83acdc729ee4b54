"""What a real node leaves on the host once its daemons are gone, and removing it: containerd's shims,
mounts under its state directory, the kubelet's cgroups, the CNI bridge, log links, changed sysctls."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

from kube_fault_proxy.rig.cluster.real_node_config import BRIDGE, Layout

CGROUPS = Path("/sys/fs/cgroup")
KUBEPODS = "kubepods"  # the kubelet's cgroup under the root of each hierarchy (cgroupfs driver)
CONTAINER_LOG_LINKS = Path("/var/log/containers")


def kill_shims(layout: Layout) -> None:
    """containerd's shims run in process groups of their own: SIGKILL those started for our socket."""
    needle = str(layout.socket).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and needle in argv:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)


def mount_points_under(mountinfo: str, root: Path) -> list[str]:
    """The mount points below root in a /proc/<pid>/mountinfo text (octal escapes decoded), deepest first."""
    prefix = str(root) + "/"
    points = set()
    for line in mountinfo.splitlines():
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
        if point.startswith(prefix):
            points.add(point)
    return sorted(points, key=lambda p: (-p.count("/"), p))


def mounts_under(root: Path) -> list[str]:
    return mount_points_under(Path("/proc/self/mountinfo").read_text(), root.resolve())


def unmount(root: Path) -> list[str]:
    """Unmount everything below root (overlay root filesystems, network namespaces, volumes)."""
    for point in mounts_under(root):
        if subprocess.run(["umount", point], capture_output=True).returncode != 0:
            subprocess.run(["umount", "--lazy", point], capture_output=True)
    return [f"mount {p}" for p in mounts_under(root)]


def sweep_cgroups() -> list[str]:
    """Remove the empty /kubepods cgroups (deepest first) from every hierarchy; name those that stay."""
    left = []
    for hierarchy in sorted(CGROUPS.iterdir()) if CGROUPS.is_dir() else []:
        top = hierarchy / KUBEPODS
        if not top.is_dir():
            continue
        for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                d.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()
        if top.is_dir():
            left.append(f"cgroup {top}")
    return left


def delete_bridge() -> list[str]:
    if not Path("/sys/class/net", BRIDGE).exists():
        return []
    subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True)
    return [f"link {BRIDGE}"] if Path("/sys/class/net", BRIDGE).exists() else []


def restore_sysctls(saved: dict[str, str]) -> list[str]:
    left = []
    for key, value in saved.items():
        path = Path("/proc/sys") / key
        try:
            if path.read_text().strip() != value:
                path.write_text(value)
        except OSError as e:
            left.append(f"sysctl {key.replace('/', '.')} (was {value}): {e.strerror}")
    return left


def remove_log_links(layout: Layout) -> None:
    """The kubelet links each container's log into /var/log/containers: remove ours."""
    if not CONTAINER_LOG_LINKS.is_dir():
        return
    ours = str(layout.pod_logs) + "/"
    for link in CONTAINER_LOG_LINKS.iterdir():
        with contextlib.suppress(OSError):
            if link.is_symlink() and os.readlink(link).startswith(ours):
                link.unlink()


def remove_made_dir(top: Path) -> list[str]:
    """Remove a fixed directory the node's daemons made: its sockets and the kubelet's device-plugin
    checkpoint, then every directory left empty; name what stays (a file something else put there)."""
    if not top.is_dir():
        return []
    for f in top.rglob("*"):
        if f.is_socket() or f.name == "kubelet_internal_checkpoint":
            f.unlink(missing_ok=True)
    for d in sorted((p for p in top.rglob("*") if p.is_dir() and not p.is_symlink()), key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):
            d.rmdir()
    with contextlib.suppress(OSError):
        top.rmdir()
    return [f"directory {top}"] if top.exists() else []


IPTABLES = ("iptables", "ip6tables")
KUBELET_CHAIN_PREFIX = "KUBE-"


def kube_chains() -> set[str]:
    """The KUBE-* chains on this host now, as `tool table chain` (iptables and ip6tables; none if absent)."""
    found = set()
    for tool in IPTABLES:
        if shutil.which(f"{tool}-save") is None:
            continue
        out = subprocess.run([f"{tool}-save"], capture_output=True, text=True).stdout
        table = ""
        for line in out.splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line.startswith(":" + KUBELET_CHAIN_PREFIX):
                found.add(f"{tool} {table} {line[1:].split()[0]}")
    return found


def remove_chains(made: set[str]) -> list[str]:
    """Remove the chains the kubelet made (its canary, KUBE-FIREWALL and the jumps to it, the hint): those
    in `made`, each as `tool table chain`; what could not be removed."""
    left = []
    for entry in sorted(made):
        tool, table, chain = entry.split()
        for builtin in ("INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING"):
            while subprocess.run([tool, "-t", table, "-D", builtin, "-j", chain], capture_output=True).returncode == 0:
                pass
        subprocess.run([tool, "-t", table, "-F", chain], capture_output=True)
    for entry in sorted(made):
        tool, table, chain = entry.split()
        if subprocess.run([tool, "-t", table, "-X", chain], capture_output=True).returncode != 0:
            left.append(f"{tool} chain {table}/{chain}")
    return left
