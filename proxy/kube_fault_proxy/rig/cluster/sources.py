"""What a build compiles other than a release as published: a patch's name and hash, a writable copy of a
module's released source with a patch applied, a source tree's hash. No `go` runs here."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

from kube_fault_proxy.rig.cluster import patches

VCS_DIRS = (".git", ".hg", ".svn")


def slug(text: str) -> str:
    """A name fit for a directory and a version suffix."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "x"


def tree_hash(root: Path, skip: tuple[str, ...] = ()) -> str:
    """A short content hash of a source directory (names and bytes of its files, except under `skip`)."""
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file() and p.name != "go.sum"
                    and not set(p.relative_to(root).parts) & set(skip)):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def patch_name(patch: Path) -> str:
    """A patch's name as a build's variant names it: the file's name slugged, without .patch or .diff."""
    return slug(patch.name.removesuffix(".patch").removesuffix(".diff"))


def patch_key(patch: Path) -> tuple[str, str]:
    """A patch's name (patch_name) and the short hash of its bytes; OSError if unreadable."""
    digest = hashlib.sha256(patch.read_bytes()).hexdigest()[:12]
    return patch_name(patch), digest


def patched_copy(pristine: Path, copy: Path, patch: Path) -> None:
    """A writable copy of `pristine` (a module's source in Go's read-only module cache) at `copy`, with the patch
    applied; patches.PatchError when it does not apply."""
    shutil.copytree(pristine, copy, copy_function=shutil.copyfile)
    for p in [copy, *copy.rglob("*")]:  # the module cache is read-only, and so is what copytree copied of it
        p.chmod(p.stat().st_mode | (0o700 if p.is_dir() else 0o600))
    patches.apply(patch, copy)
