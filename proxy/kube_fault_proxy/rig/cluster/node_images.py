"""The real node's images, made here (no registry is reachable): Debian's static busybox in an OCI archive.

One layer serves two images: the pod sandbox ("pause": a sleep that never ends; containerd stops a
sandbox with SIGKILL, so it needs no signal handling) and a workload image with a shell and the usual
tools (`sh`, `echo`, `cat`, `sleep`, `wget`, …), for pods that run a command and for `kubectl exec`.
The archive is what `ctr images import` reads: an OCI image layout whose index names each image."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static: one statically linked binary
APPLETS = ("sh", "ash", "cat", "cp", "date", "echo", "env", "false", "grep", "head", "hostname", "id", "kill",
           "ls", "mkdir", "mv", "nc", "ps", "pwd", "rm", "sed", "sleep", "tail", "tee", "touch", "true", "uname",
           "wc", "wget", "whoami")
SANDBOX_COMMAND = ("/bin/sleep", "2147483647")
REPOSITORY = "kfp.local"
_EPOCH = 0  # fixed timestamps: the same busybox gives the same digests


@dataclass(frozen=True)
class Image:
    """One image of the archive: its name and what it runs."""

    name: str
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()


def images(tag: str) -> tuple[Image, Image]:
    """The sandbox image and the workload image, tagged with the busybox build they hold."""
    return (Image(f"{REPOSITORY}/pause:{tag}", entrypoint=SANDBOX_COMMAND),
            Image(f"{REPOSITORY}/busybox:{tag}", cmd=("/bin/sh",)))


def busybox_tag(busybox: bytes) -> str:
    """A tag naming the busybox binary by content, so a changed binary never reuses a stale image."""
    return "bb-" + hashlib.sha256(busybox).hexdigest()[:12]


def _entry(tar: tarfile.TarFile, name: str, kind: bytes, data: bytes = b"", mode: int = 0o755,
           link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime, info.linkname = kind, mode, _EPOCH, link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)


def layer(busybox: bytes) -> bytes:
    """The root filesystem: /bin/busybox, a symlink per applet, and the directories a runtime mounts over."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "dev", "etc", "proc", "sys", "tmp", "var", "root"):
            _entry(tar, d, tarfile.DIRTYPE, mode=0o1777 if d == "tmp" else 0o755)
        _entry(tar, "bin/busybox", tarfile.REGTYPE, busybox)
        for applet in APPLETS:
            _entry(tar, f"bin/{applet}", tarfile.SYMTYPE, link="busybox")
        _entry(tar, "etc/passwd", tarfile.REGTYPE, b"root:x:0:0:root:/root:/bin/sh\n", 0o644)
        _entry(tar, "etc/group", tarfile.REGTYPE, b"root:x:0:\n", 0o644)
    return out.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    _entry(tar, f"blobs/sha256/{digest.removeprefix('sha256:')}", tarfile.REGTYPE, data, 0o644)
    return digest


def _descriptor(media_type: str, digest: str, data: bytes, **extra: Any) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": digest, "size": len(data), **extra}


def oci_archive(busybox: bytes, wanted: tuple[Image, ...]) -> bytes:
    """An OCI image layout as one tar: a shared layer, a config and manifest per image, an index naming them."""
    rootfs = layer(busybox)
    out = io.BytesIO()
    manifests = []
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        _entry(tar, "oci-layout", tarfile.REGTYPE, b'{"imageLayoutVersion":"1.0.0"}', 0o644)
        layer_digest = _blob(tar, rootfs)
        diff_id = layer_digest  # uncompressed: the layer's digest is its diff id
        for image in wanted:
            run: dict[str, Any] = {"Env": ["PATH=/bin"], "WorkingDir": "/"}
            if image.entrypoint:
                run["Entrypoint"] = list(image.entrypoint)
            if image.cmd:
                run["Cmd"] = list(image.cmd)
            config = json.dumps({"architecture": "amd64", "os": "linux", "config": run,
                                 "rootfs": {"type": "layers", "diff_ids": [diff_id]}}, sort_keys=True).encode()
            config_digest = _blob(tar, config)
            manifest = json.dumps({
                "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": _descriptor("application/vnd.oci.image.config.v1+json", config_digest, config),
                "layers": [_descriptor("application/vnd.oci.image.layer.v1.tar", layer_digest, rootfs)],
            }, sort_keys=True).encode()
            manifests.append(_descriptor(
                "application/vnd.oci.image.manifest.v1+json", _blob(tar, manifest), manifest,
                platform={"architecture": "amd64", "os": "linux"},
                annotations={"io.containerd.image.name": image.name,
                             "org.opencontainers.image.ref.name": image.name.rsplit(":", 1)[1]}))
        index = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                            "manifests": manifests}, sort_keys=True).encode()
        _entry(tar, "index.json", tarfile.REGTYPE, index, 0o644)
    return out.getvalue()
