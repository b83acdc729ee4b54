"""Build the real components from the Go module proxy into a cache directory, once per version."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kube_fault_proxy.rig.cluster import feature_gates, patches, sources, versions
from kube_fault_proxy.rig.cluster.gomod import (
    SHIM,
    kubernetes_gomod,
    kustomized_documents,
    restated_gomod,
    yunikorn_gomod,
)
from kube_fault_proxy.rig.cluster.sources import VCS_DIRS, tree_hash
from kube_fault_proxy.rig.console import Progress

KWOK = "sigs.k8s.io/kwok"
# KWOK's "fast" stages (node-fast + node heartbeat with lease + pod-fast), the set its docs apply
# for fake nodes without a kubelet; taken from the pinned module at build time, kept beside the binary.
KWOK_STAGES = "kustomize/stage/fast"


class BuildError(RuntimeError):
    """A component could not be built; the message names the module and version."""


class BuildInputError(BuildError):
    """What we were given to build (a patch, a source tree) is at fault: it does not apply or does not build."""


def cache_dir() -> Path:
    """$KFP_CACHE_DIR, else ~/.cache/kube-fault-proxy."""
    env = os.environ.get("KFP_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "kube-fault-proxy"


@dataclass(frozen=True)
class Component:
    """One binary: the module that holds it, the package to build, and the module we write."""

    name: str
    version: str
    package: str
    ldflags: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    source: Path | None = None  # a Go module in this repository, built as it is
    shim_patch: Path | None = None  # YuniKorn only: a unified diff applied to a copy of the released shim
    shim_tree: Path | None = None  # YuniKorn only: a yunikorn-k8shim checkout, built through a replace directive
    variant: str | None = None  # what the build is, without hash: a patch's name, or src-<dir>
    k8s_patch: Path | None = None  # kube-scheduler only: a unified diff applied to a copy of k8s.io/kubernetes
    release: str | None = None  # a patched Kubernetes build: the release its source is (its version names the patch)

    @property
    def binary(self) -> Path:
        """Where the built binary lives."""
        return cache_dir() / "bin" / f"{self.name}-{self.version}" / self.name


def _k8s_ldflags(version: str) -> tuple[str, ...]:
    major, minor = version.lstrip("v").split(".")[:2]
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.gitVersion={version}", f"-X {pkg}.gitMajor={major}",
                  f"-X {pkg}.gitMinor={minor}", f"-X {pkg}.gitTreeState=clean"]
    return tuple(flags)


def release(version: str) -> versions.Line:
    """The release's line (its etcd and Go toolchain); BuildInputError for a version the rig does not build."""
    try:
        return versions.line(version)
    except ValueError as e:
        raise BuildInputError(str(e)) from None


def toolchain_env(version: str) -> dict[str, str]:
    """What every `go` command building this Kubernetes release needs in its environment: GOTOOLCHAIN for a
    release whose go.mod asks for a newer Go than the machine's (v1.38: go1.27.3), nothing for the others."""
    toolchain = release(version).toolchain
    return {"GOTOOLCHAIN": toolchain} if toolchain else {}


def kubernetes(name: str, version: str = versions.KUBERNETES) -> Component:
    """kube-apiserver, kube-controller-manager, kube-scheduler, kubectl or kubelet from k8s.io/kubernetes at
    `version` (default: versions.KUBERNETES)."""
    return Component(name, version, f"k8s.io/kubernetes/cmd/{name}", _k8s_ldflags(version), toolchain_env(version))


def etcd(version: str = versions.KUBERNETES) -> Component:
    """The etcd server the Kubernetes release `version` is tested with (versions.LINES)."""
    return Component("etcd", release(version).etcd, "go.etcd.io/etcd/server/v3")


BURST_SOURCE = Path(__file__).resolve().with_name("burst")


def burst_client() -> Component:
    """kfp-burst: concurrent requests through client-go's transport (bench/burst), versioned by content."""
    return Component("kfp-burst", f"src-{tree_hash(BURST_SOURCE)}", ".", source=BURST_SOURCE)


def _patch_key(patch: Path, flag: str) -> tuple[str, str]:
    """A patch's name and the short hash of its bytes (what a build is keyed by); BuildInputError if unreadable."""
    try:
        return sources.patch_key(patch)
    except OSError as e:
        raise BuildInputError(f"{flag} {patch}: {e.strerror or e}") from None


def kube_scheduler(patch: Path, version: str = versions.KUBERNETES) -> Component:
    """kube-scheduler of release `version`, a unified diff applied to a copy of k8s.io/kubernetes (a replace
    directive); the build is `<version>+<patch name>-<hash of its bytes>`: a changed patch builds anew."""
    variant, digest = _patch_key(patch, "--kube-scheduler-patch")
    released = kubernetes("kube-scheduler", version)
    return Component(released.name, f"{version}+{variant}-{digest}", released.package, released.ldflags, released.env,
                     variant=variant, k8s_patch=patch.resolve(), release=version)


def yunikorn(patch: Path | None = None, source: Path | None = None) -> Component:
    """YuniKorn as released, or v1.9.0 with a patch, or a source tree; the version names the build.

    A patch's build is `v1.9.0+<patch name>-<hash of its bytes>`, a tree's `src+<dir name>-<hash of
    its files>`: the same input reuses the cached binary, a changed one builds anew."""
    if patch is not None and source is not None:
        raise BuildInputError("--yunikorn-patch and --yunikorn-source exclude each other")
    version, tree, variant = versions.YUNIKORN, None, None
    if patch is not None:
        variant, digest = _patch_key(patch, "--yunikorn-patch")
        version = f"{versions.YUNIKORN}+{variant}-{digest}"
        patch = patch.resolve()
    if source is not None:
        tree = source.resolve()
        gomod = tree / "go.mod"
        if not gomod.is_file() or not re.search(rf"^module\s+{re.escape(SHIM)}\s*$", gomod.read_text(), re.M):
            raise BuildInputError(f"--yunikorn-source {source}: not a {SHIM} checkout (no go.mod naming that module)")
        variant = f"src-{sources.slug(tree.name)}"
        version = f"src+{sources.slug(tree.name)}-{tree_hash(tree, VCS_DIRS)}"
    return Component("yunikorn-scheduler", version, f"{SHIM}/pkg/cmd/shim",
                     (f"-X {SHIM}/pkg/conf.buildVersion={version.lstrip('v')}",),
                     {"GONOSUMDB": versions.YUNIKORN_NOSUMDB}, shim_patch=patch, shim_tree=tree, variant=variant)


ETCD = etcd()
K8S_COPY = "kubernetes"  # a patched kube-scheduler's copy of k8s.io/kubernetes, in its build directory
YUNIKORN = yunikorn()
KWOK_COMPONENT = Component("kwok", versions.KWOK, f"{KWOK}/cmd/kwok",
                           (f"-X {KWOK}/pkg/consts.Version={versions.KWOK.lstrip('v')}",))
# The components of one Kubernetes release: its own binaries and its etcd.
RELEASE_COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kubelet", "etcd")


def components(version: str = versions.KUBERNETES) -> dict[str, Component]:
    """Every component by name, the Kubernetes ones (and etcd) of release `version`; the same names as ALL."""
    own = [kubernetes(n, version) for n in RELEASE_COMPONENTS if n != "etcd"]
    return {c.name: c for c in (*own, etcd(version), KWOK_COMPONENT, YUNIKORN, burst_client())}


ALL = components()


# Besides k8s.io/kubernetes's registry, the gates its binaries add to the same --feature-gates, by module.
GATE_FILES = {"k8s.io/client-go": ("features/known_features.go",),
              "k8s.io/component-base": ("logs/api/v1/kube_features.go", "featuregate/feature_gate.go")}


def gates_file(version: str) -> Path:
    """Where the gates read from a release's source are kept (one name a line), so later checks need no `go`."""
    return cache_dir() / "gates" / f"kubernetes-{version}.txt"


def module_source(module: str, version: str, release: str = versions.KUBERNETES, go: Toolchain | None = None) -> Path:
    """A module's source at a version, from Go's module cache (fetched from the module proxy when missing; read
    only), with the Go toolchain Kubernetes `release` builds with."""
    go = go or Toolchain()
    workdir = cache_dir() / "build"
    workdir.mkdir(parents=True, exist_ok=True)
    return go.module_dir(module, version, _go_env(toolchain_env(release)), workdir)


def known_gates(version: str, go: Toolchain | None = None) -> frozenset[str] | None:
    """The feature gates release `version` has, read from its source (and its staging modules') in the Go
    module cache: pkg/features/kube_features.go's registry, client-go's and component-base's gates. Kept in
    gates_file(version) once read. None when they were never read and there is no `go` to fetch the source
    (a machine with prebuilt binaries only)."""
    kept = gates_file(version)
    if kept.is_file():
        return frozenset(kept.read_text().split())
    if go is None and shutil.which("go") is None:
        return None
    root = module_source("k8s.io/kubernetes", version, version, go)
    twin = "v0." + version.removeprefix("v1.")
    others = [module_source(module, twin, version, go) / f for module, files in GATE_FILES.items() for f in files]
    try:
        names = feature_gates.known(root / "pkg" / "features" / "kube_features.go", others)
    except (OSError, ValueError) as e:
        raise BuildError(f"reading the feature gates of k8s.io/kubernetes@{version}: {e}") from None
    kept.parent.mkdir(parents=True, exist_ok=True)
    partial = kept.with_suffix(".partial")
    partial.write_text("".join(f"{n}\n" for n in sorted(names)))
    partial.replace(kept)
    return names


def kwok_stages() -> Path:
    """The multi-document YAML of KWOK's fast stages, written beside the kwok binary when it is built."""
    return KWOK_COMPONENT.binary.parent / "stage-fast.yaml"


def _go_env(extra: dict[str, str]) -> dict[str, str]:
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod -buildvcs=false", **extra}
    env.pop("GOWORK", None)
    return env


def _go(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    if shutil.which("go") is None:
        raise BuildError("the `go` toolchain is not on PATH (Go >= 1.26 builds the real components)")
    r = subprocess.run(["go", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise BuildError(f"go {' '.join(args)} failed in {cwd}:\n{r.stderr.strip()[-4000:]}")
    return r.stdout


def _download(module: str, version: str, env: dict[str, str], workdir: Path) -> dict[str, str]:
    out = _go(["mod", "download", "-json", f"{module}@{version}"], workdir, env)
    info: dict[str, str] = json.loads(out)
    if info.get("Error"):
        raise BuildError(f"the Go module proxy does not serve {module}@{version}: {info['Error']}")
    return info


def _prepare(c: Component, moddir: Path, env: dict[str, str]) -> None:
    moddir.mkdir(parents=True, exist_ok=True)
    if c.source is not None:
        shutil.copytree(c.source, moddir, dirs_exist_ok=True)
        _go(["mod", "tidy"], moddir, env)
        return
    if c.name == "etcd":
        (moddir / "go.mod").write_text(f"module kfpetcd\n\ngo 1.26\n\nrequire {c.package} {c.version}\n")
    elif c.name == "kwok":
        info = _download(KWOK, c.version, env, moddir)
        (moddir / "go.mod").write_text(restated_gomod("kfpkwok", KWOK, Path(info["GoMod"]).read_text(), c.version))
        shutil.copyfile(Path(info["Dir"]) / "go.sum", moddir / "go.sum")
        stages = kustomized_documents(Path(info["Dir"]) / KWOK_STAGES)
        kwok_stages().parent.mkdir(parents=True, exist_ok=True)
        kwok_stages().write_text("\n---\n".join(stages) + "\n")
    elif c.name == "yunikorn-scheduler" and (tree := shim_tree(c, moddir)) is not None:
        (moddir / "go.mod").write_text(
            yunikorn_gomod((tree / "go.mod").read_text(), versions.YUNIKORN, versions.YUNIKORN_REPLACES, tree))
        if (tree / "go.sum").is_file():
            shutil.copyfile(tree / "go.sum", moddir / "go.sum")
    elif c.name == "yunikorn-scheduler":
        info = _download(SHIM, c.version, env, moddir)
        (moddir / "go.mod").write_text(
            yunikorn_gomod(Path(info["GoMod"]).read_text(), c.version, versions.YUNIKORN_REPLACES))
        shutil.copyfile(Path(info["Dir"]) / "go.sum", moddir / "go.sum")
    else:
        release = c.release or c.version
        info = _download("k8s.io/kubernetes", release, env, moddir)
        gomod = kubernetes_gomod(Path(info["GoMod"]).read_text(), release)
        if c.k8s_patch is not None:  # the patched copy _patched_copy made
            gomod += f"\nreplace k8s.io/kubernetes => ./{K8S_COPY}\n"
        (moddir / "go.mod").write_text(gomod)
    (moddir / "tools.go").write_text(f'//go:build tools\n\npackage tools\n\nimport _ "{c.package}"\n')
    _go(["mod", "tidy"], moddir, env)


def shim_tree(c: Component, moddir: Path) -> Path | None:
    """The local shim source a YuniKorn build uses: its patched copy, its checkout, or None (the release)."""
    if c.shim_patch is not None:
        return moddir / "k8shim"
    return c.shim_tree


def _package_count(c: Component, moddir: Path, env: dict[str, str]) -> int | None:
    """How many packages the build may compile (`go list -deps`): the bar's total, if go can tell."""
    try:
        return len(_go(["list", "-deps", c.package], moddir, env).splitlines())
    except BuildError:
        return None


class Toolchain:
    """The two steps of a build that run `go`; unit tests pass a stand-in, so none runs `go`."""

    def module_dir(self, module: str, version: str, env: dict[str, str], workdir: Path) -> Path:
        """A module's source in Go's module cache (read-only: copy it before changing anything)."""
        return Path(_download(module, version, env, workdir)["Dir"])

    def compile(self, c: Component, moddir: Path, out: Path, env: dict[str, str], bar: Progress) -> None:
        """Resolve the modules in moddir and build the component's package into `out`."""
        _prepare(c, moddir, env)
        total = _package_count(c, moddir, env)
        cmd = ["go", "build", "-v", "-trimpath", "-ldflags", " ".join(("-s", "-w", *c.ldflags)), "-o", str(out),
               c.package]
        proc = subprocess.Popen(cmd, cwd=moddir, env=env, stderr=subprocess.PIPE, text=True)
        assert proc.stderr is not None
        tail: list[str] = []
        compiled = 0
        for line in proc.stderr:  # `go build -v` names each package as it compiles it
            tail = [*tail[-40:], line.rstrip()]
            compiled += 1
            bar.update(compiled, total, "packages compiled")
        if proc.wait() != 0:
            raise BuildError(f"building {c.package}@{c.version} failed:\n" + "\n".join(tail))
        bar.update(total or compiled, total or compiled, "packages compiled")


def _patched_copy(module: str, version: str, patch: Path, copy: Path, env: dict[str, str], go: Toolchain) -> None:
    """A writable copy of a module's released source at `copy` (a YuniKorn patch's: moddir/k8shim), patched."""
    try:
        sources.patched_copy(go.module_dir(module, version, env, copy.parent), copy, patch)
    except patches.PatchError as e:
        raise BuildInputError(f"{e} (against {module}@{version})") from None


def build(c: Component, say: bool = True, go: Toolchain | None = None) -> Path:
    """The component's binary, built now if the cache does not have this version yet.

    A patched or source-tree build that fails leaves nothing behind: no binary, no build directory.
    Two processes that want the same binary build it once: the second waits for the first."""
    if c.binary.is_file():
        return c.binary
    with _one_builder(c):
        if c.binary.is_file():  # built by another process while this one waited
            return c.binary
        return _build(c, say, go or Toolchain())


@contextlib.contextmanager
def _one_builder(c: Component) -> Iterator[None]:
    """Hold the component's build lock (an flock on a file under the cache's locks/) while it is built:
    two builds of one binary into one cache (a scenario run beside `cluster build`) shared the
    `.partial` file and the build directory, and the second one's rename failed."""
    locks = cache_dir() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with (locks / f"{c.binary.parent.name}.lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released as the file closes, or the process dies
        yield


def _build(c: Component, say: bool, go: Toolchain) -> Path:
    """Compile the component into the cache (its build lock held)."""
    env = _go_env(c.env)
    moddir = cache_dir() / "build" / f"{c.name}-{c.version}"
    override = c.shim_patch or c.shim_tree or c.k8s_patch
    tmp = c.binary.with_suffix(".partial")
    # A build takes minutes: a plain line every 15 s is enough in a log; a terminal gets a bar.
    with Progress(f"{c.name} {c.version}", enabled=say, interval=15.0) as bar:
        try:
            bar.update(0, status="resolving modules")
            if override is not None:
                shutil.rmtree(moddir, ignore_errors=True)
                moddir.mkdir(parents=True)
            if c.shim_patch is not None:
                _patched_copy(SHIM, versions.YUNIKORN, c.shim_patch, moddir / "k8shim", env, go)
                bar.note(f"  {c.name} {c.version}: applied {c.shim_patch.name}")
            if c.k8s_patch is not None:
                _patched_copy("k8s.io/kubernetes", c.release or c.version, c.k8s_patch, moddir / K8S_COPY, env, go)
                bar.note(f"  {c.name} {c.version}: applied {c.k8s_patch.name}")
            tmp.parent.mkdir(parents=True, exist_ok=True)
            try:
                go.compile(c, moddir, tmp, env, bar)
            except BuildError as e:
                if override is None or isinstance(e, BuildInputError):
                    raise
                raise BuildInputError(f"{c.name} {c.version} from {override} does not build:\n{e}") from None
        except BaseException:
            if override is not None:
                shutil.rmtree(moddir, ignore_errors=True)
                tmp.unlink(missing_ok=True)
                with contextlib.suppress(OSError):
                    tmp.parent.rmdir()  # only if empty: never a binary that is there
            raise
        tmp.replace(c.binary)
        bar.note(f"  {c.name} {c.version}: built {c.binary}")
    return c.binary


def build_all(names: list[str], say: bool = True, overrides: dict[str, Component] | None = None) -> dict[str, Path]:
    """Build (or reuse) several components, one at a time (the machine has two cores); `overrides`
    replaces some of ALL (e.g. a patched YuniKorn)."""
    chosen = {**ALL, **(overrides or {})}
    missing = [n for n in names if not chosen[n].binary.is_file()]
    if missing and say:
        print(f"==> building {', '.join(missing)} from the Go module proxy into {cache_dir()} "
              "(first time only; a few minutes each)", file=sys.stderr, flush=True)
    return {n: build(chosen[n], say) for n in names}
