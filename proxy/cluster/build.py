"""Build the real components from the Go module proxy into a cache directory, once per version."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from proxy.cluster import versions
from proxy.console import Progress

SHIM = "github.com/apache/yunikorn-k8shim"
KWOK = "sigs.k8s.io/kwok"
# KWOK's "fast" stages (node-fast + node heartbeat with lease + pod-fast), the set its docs apply
# for fake nodes without a kubelet; taken from the pinned module at build time, kept beside the binary.
KWOK_STAGES = "kustomize/stage/fast"


class BuildError(RuntimeError):
    """A component could not be built; the message names the module and version."""


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


def kubernetes(name: str) -> Component:
    """kube-apiserver, kube-controller-manager, kube-scheduler or kubectl from k8s.io/kubernetes."""
    v = versions.KUBERNETES
    return Component(name, v, f"k8s.io/kubernetes/cmd/{name}", _k8s_ldflags(v))


def tree_hash(root: Path) -> str:
    """A short content hash of a source directory (names and bytes of its files)."""
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file() and p.name != "go.sum"):
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:12]


BURST_SOURCE = Path(__file__).resolve().parents[2] / "bench" / "burst"


def burst_client() -> Component:
    """kfp-burst: concurrent requests through client-go's transport (bench/burst), versioned by content."""
    return Component("kfp-burst", f"src-{tree_hash(BURST_SOURCE)}", ".", source=BURST_SOURCE)


ETCD = Component("etcd", versions.ETCD, "go.etcd.io/etcd/server/v3")
YUNIKORN = Component(
    "yunikorn-scheduler", versions.YUNIKORN, f"{SHIM}/pkg/cmd/shim",
    (f"-X {SHIM}/pkg/conf.buildVersion={versions.YUNIKORN.lstrip('v')}",),
    {"GONOSUMDB": versions.YUNIKORN_NOSUMDB},
)
KWOK_COMPONENT = Component("kwok", versions.KWOK, f"{KWOK}/cmd/kwok",
                           (f"-X {KWOK}/pkg/consts.Version={versions.KWOK.lstrip('v')}",))
ALL = {c.name: c for c in (kubernetes("kube-apiserver"), kubernetes("kube-controller-manager"),
                           kubernetes("kube-scheduler"), kubernetes("kubectl"), ETCD, KWOK_COMPONENT, YUNIKORN,
                           burst_client())}


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


def _directives(gomod: str, keyword: str) -> list[str]:
    """The lines of every `keyword ( … )` block and single-line `keyword …` directive."""
    rows: list[str] = []
    for m in re.finditer(rf"^{keyword}\s*\((.*?)^\)", gomod, re.M | re.S):
        rows += [line.split("//")[0].strip() for line in m.group(1).splitlines()]
    rows += [m.group(1).split("//")[0].strip() for m in re.finditer(rf"^{keyword}\s+([^(\s].*)$", gomod, re.M)]
    return [r for r in rows if r]


def kubernetes_gomod(gomod: str, version: str) -> str:
    """Our module for k8s.io/kubernetes: each required staging module replaced by its v0.X.Y twin."""
    twin = "v0." + version.removeprefix("v1.")
    required = {r.split()[0] for r in _directives(gomod, "require")}
    staging = sorted(
        r.split("=>")[0].split()[0] for r in _directives(gomod, "replace")
        if "./staging/" in r and r.split("=>")[0].split()[0] in required
    )
    go_line = re.search(r"^go\s+(\S+)", gomod, re.M)
    godebug = re.findall(r"^godebug\s+.*$", gomod, re.M)
    lines = ["module kfpbuild", "", f"go {go_line.group(1) if go_line else '1.26'}", "", *godebug,
             "", f"require k8s.io/kubernetes {version}", "", "replace ("]
    lines += [f"\t{m} => {m} {twin}" for m in staging] + [")", ""]
    return "\n".join(lines)


def yunikorn_gomod(gomod: str, version: str, replaces: dict[str, str]) -> str:
    """Our module for the YuniKorn shim: its requires and replaces restated, plus substitutions."""
    requires = _directives(gomod, "require")
    required = {r.split()[0] for r in requires}
    reps: dict[str, str] = {}
    for r in _directives(gomod, "replace"):
        lhs, rhs = (s.strip() for s in r.split("=>"))
        if lhs.split()[0] in required:
            reps[lhs.split()[0]] = rhs
    for module, v in replaces.items():
        reps[module] = f"{module} {v}"
    go_line = re.search(r"^go\s+(\S+)", gomod, re.M)
    lines = ["module kfpyunikorn", "", f"go {go_line.group(1) if go_line else '1.25'}", "",
             f"require {SHIM} {version}", "", "require ("]
    lines += [f"\t{r}" for r in requires] + [")", "", "replace ("]
    lines += [f"\t{k} => {v}" for k, v in sorted(reps.items())] + [")", ""]
    return "\n".join(lines)


def restated_gomod(name: str, module: str, gomod: str, version: str) -> str:
    """Our module for a program whose go.mod has no replace directives: its requires restated, so
    the build resolves exactly the versions its authors tested (its go.sum is copied beside)."""
    go_line = re.search(r"^go\s+(\S+)", gomod, re.M)
    lines = [f"module {name}", "", f"go {go_line.group(1) if go_line else '1.24'}", "",
             f"require {module} {version}", "", "require ("]
    lines += [f"\t{r}" for r in _directives(gomod, "require")] + [")", ""]
    return "\n".join(lines)


def kustomized_documents(root: Path) -> list[str]:
    """The YAML documents a kustomization's `resources` name, directories followed recursively."""
    docs: list[str] = []
    kustomization = yaml.safe_load((root / "kustomization.yaml").read_text()) or {}
    for resource in kustomization.get("resources", []):
        path = (root / resource).resolve()
        docs += kustomized_documents(path) if path.is_dir() else [path.read_text().strip()]
    return docs


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
    elif c.name == "yunikorn-scheduler":
        info = _download(SHIM, c.version, env, moddir)
        (moddir / "go.mod").write_text(
            yunikorn_gomod(Path(info["GoMod"]).read_text(), c.version, versions.YUNIKORN_REPLACES))
        shutil.copyfile(Path(info["Dir"]) / "go.sum", moddir / "go.sum")
    else:
        info = _download("k8s.io/kubernetes", c.version, env, moddir)
        (moddir / "go.mod").write_text(kubernetes_gomod(Path(info["GoMod"]).read_text(), c.version))
    (moddir / "tools.go").write_text(f'//go:build tools\n\npackage tools\n\nimport _ "{c.package}"\n')
    _go(["mod", "tidy"], moddir, env)


def _package_count(c: Component, moddir: Path, env: dict[str, str]) -> int | None:
    """How many packages the build may compile (`go list -deps`): the bar's total, if go can tell."""
    try:
        return len(_go(["list", "-deps", c.package], moddir, env).splitlines())
    except BuildError:
        return None


def build(c: Component, say: bool = True) -> Path:
    """The component's binary, built now if the cache does not have this version yet."""
    if c.binary.is_file():
        return c.binary
    env = _go_env(c.env)
    moddir = cache_dir() / "build" / f"{c.name}-{c.version}"
    # A build takes minutes: a plain line every 15 s is enough in a log; a terminal gets a bar.
    with Progress(f"{c.name} {c.version}", enabled=say, interval=15.0) as bar:
        bar.update(0, status="resolving modules")
        _prepare(c, moddir, env)
        total = _package_count(c, moddir, env)
        tmp = c.binary.with_suffix(".partial")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        cmd = ["go", "build", "-v", "-trimpath", "-ldflags", " ".join(("-s", "-w", *c.ldflags)), "-o", str(tmp),
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
        tmp.replace(c.binary)
        bar.update(total or compiled, total or compiled, "packages compiled")
        bar.note(f"  {c.name} {c.version}: built {c.binary}")
    return c.binary


def build_all(names: list[str], say: bool = True) -> dict[str, Path]:
    """Build (or reuse) several components, one at a time (the machine has two cores)."""
    missing = [n for n in names if not ALL[n].binary.is_file()]
    if missing and say:
        print(f"==> building {', '.join(missing)} from the Go module proxy into {cache_dir()} "
              "(first time only; a few minutes each)", file=sys.stderr, flush=True)
    return {n: build(ALL[n], say) for n in names}
