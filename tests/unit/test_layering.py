"""House rule 1: the pure core imports neither mitmproxy nor FastAPI; each has one home."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "proxy" / "kube_fault_proxy" / "proxy"
MODULES = sorted(PACKAGE.rglob("*.py"))


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def home(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0]


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(PACKAGE)) for p in MODULES])
def test_framework_imports_stay_home(path: Path) -> None:
    roots = imported_roots(path)
    if "mitmproxy" in roots:
        assert home(path) == "mitm", f"{path} imports mitmproxy outside proxy/mitm"
    if roots & {"fastapi", "starlette", "uvicorn"}:
        assert home(path) == "control", f"{path} imports FastAPI outside proxy/control"


def test_only_the_addon_touches_flows() -> None:
    users = [p.name for p in MODULES if "HTTPFlow" in p.read_text()]
    assert users == ["addon.py"]


PURE = ["requests/identity.py", "requests/binding.py", "requests/status.py", "profiles/strict.py",
        "profiles/profile.py", "profiles/loader.py", "profiles/problems.py", "profiles/yaml_reader.py",
        "profiles/match.py", "engine.py", "runtime.py", "journal.py", "profiles/library.py", "faults",
        "crd/objects.py", "crd/schema.py", "crd/definitions.py", "crd/reconciler.py", "crd/status.py"]


def test_pure_core_has_no_framework_imports() -> None:
    for name in PURE:
        target = PACKAGE / name
        for path in [target] if target.is_file() else sorted(target.rglob("*.py")):
            assert not imported_roots(path) & {"mitmproxy", "fastapi", "starlette", "uvicorn",
                                               "asyncio", "socket", "prometheus_client"}, path


def test_prometheus_has_one_home() -> None:
    """Only the control plane's collector (read at scrape time) and its route import prometheus_client."""
    users = sorted(str(p.relative_to(PACKAGE)) for p in MODULES if "prometheus_client" in imported_roots(p))
    assert users == ["control/metrics.py", "control/observe.py"]
