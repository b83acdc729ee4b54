"""A path a docstring or a comment in proxy/ names is a file or folder of this repository: a path that is not
there (a file renamed, a note never committed) fails here. Paths of other projects' sources and of files the rig
writes are told apart by name, each with its reason, and each still in use."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "proxy" / "kube_fault_proxy"
SKIPPED_DIRS = {".git", ".venv", "__pycache__", "node_modules", "site"}
PATH = re.compile(r"(?<![\w/.:@-])((?:[\w.-]+/)*[\w-]+\.(?:py|md|yaml|yml|json|go|sh|toml|proto|patch|html|js|css|"
                  r"svg|txt|jsonl))\b")
# Upstream sources, cited by their path in their own project (Kubernetes', etcd's, Go's), not files here.
UPSTREAM_SUFFIXES = (".go", ".proto")
# Named as what they are; checked to be still named, so this list does not outlive its entries.
NOT_HERE = {
    "build/dependencies.yaml": "Kubernetes' own: the etcd version a release is tested with",
    "hack/lib/etcd.sh": "Kubernetes' own: the etcd version a release is tested with",
    "config.toml": "containerd's configuration, written on a real node",
    "cluster.json": "written by `cluster up` in its state directory",
    "summary.md": "written by `scenario run` beside a report",
    "timeline.svg": "written by `scenario run` beside a report",
    "timeline.html": "written by `scenario run` beside a report",
    "report.md": "written by a search or a campaign",
    "campaign.json": "written by a campaign",
    "trials.jsonl": "written by a search: one line per trial",
}


def repository() -> set[str]:
    """Every file and folder of the repository, as paths from its root."""
    found: set[str] = set()
    stack = [ROOT]
    while stack:
        folder = stack.pop()
        for entry in folder.iterdir():
            if entry.name in SKIPPED_DIRS or entry.name.endswith(".egg-info"):
                continue
            found.add(entry.relative_to(ROOT).as_posix())
            if entry.is_dir() and not entry.is_symlink():
                stack.append(entry)
    return found


def exists(path: str, known: set[str]) -> bool:
    """Whether the path is one of the repository's, or its tail (as the package's modules are cited)."""
    path = path.strip("/")
    return any(k == path or k.endswith("/" + path) for k in known)


def prose(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every docstring and comment of a module, and of every string written as a comment into a
    generated file (one that starts with `# `)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                yield body[0].lineno, body[0].value.value
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("# "):
            yield node.lineno, node.value
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def cited(source: str) -> Iterator[tuple[int, str]]:
    """(line, path) of every path the module's prose names."""
    for line, text in prose(source):
        for match in PATH.finditer(text):
            yield line + text[:match.start()].count("\n"), match.group(1)


def missing(source: str, known: set[str]) -> list[tuple[int, str]]:
    """The paths the prose names that are nowhere in the repository (nor another project's, nor written)."""
    return sorted({(line, path) for line, path in cited(source)
                   if not path.endswith(UPSTREAM_SUFFIXES) and path not in NOT_HERE and not exists(path, known)})


@pytest.fixture(scope="module")
def known() -> set[str]:
    return repository()


def test_a_missing_path_is_found(known: set[str]) -> None:
    source = ('"""See notes/fault-search.md and `hooks.py`."""\n# (proxy/profile.py)\n'
              'HEADER = "# Generated from proxy/profile.py"\n'
              'def f() -> None:\n    """From rig/search/waist.py, `mitm/patches/internals.py` and requestinfo.go."""\n')
    assert missing(source, known) == [(1, "hooks.py"), (1, "notes/fault-search.md"), (2, "proxy/profile.py"),
                                      (3, "proxy/profile.py")]
    assert exists("rig/search/waist.py", known) and not exists("search/waist.pyc", known)


@pytest.mark.parametrize("module", sorted(str(p.relative_to(SOURCES)) for p in SOURCES.rglob("*.py")))
def test_every_path_a_docstring_names_exists(module: str, known: set[str]) -> None:
    assert missing((SOURCES / module).read_text(encoding="utf-8"), known) == []


def test_every_path_named_as_not_here_is_still_named() -> None:
    named = {path for p in SOURCES.rglob("*.py") for _, path in cited(p.read_text(encoding="utf-8"))}
    assert sorted(set(NOT_HERE) - named) == []
    assert all(PurePosixPath(p).suffix for p in NOT_HERE)
