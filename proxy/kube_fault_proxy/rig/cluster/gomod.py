"""The go.mod of the module of our own each build compiles in, restated from the upstream module's (its requires,
its replaces, the twins of Kubernetes' staging modules), and the YAML documents a kustomization names."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from kube_fault_proxy.rig.cluster import versions

SHIM = "github.com/apache/yunikorn-k8shim"


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


def yunikorn_gomod(gomod: str, version: str, replaces: dict[str, str], tree: Path | None = None) -> str:
    """Our module for the YuniKorn shim: its requires and replaces restated, plus substitutions.

    With `tree` (a local shim), the shim is replaced by it, its relative replaces are made absolute,
    and the core and SI are substituted only where it pins the versions the module proxy refuses."""
    requires = _directives(gomod, "require")
    pinned = {r.split()[0]: r.split()[1] for r in requires if len(r.split()) > 1}
    reps: dict[str, str] = {}
    for r in _directives(gomod, "replace"):
        lhs, rhs = (s.strip() for s in r.split("=>"))
        if tree is not None and rhs.startswith(("./", "../")):
            rhs = str((tree / rhs).resolve())
        if lhs.split()[0] in pinned:
            reps[lhs.split()[0]] = rhs
    for module, v in replaces.items():
        if tree is None or pinned.get(module) == versions.YUNIKORN_REFUSED_PINS.get(module):
            reps[module] = f"{module} {v}"
    if tree is not None:
        reps[SHIM] = str(tree)
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
