"""CONTRIBUTING's "add a fault kind" recipe matches the code: it lists every file that names a kind, and no file
that does not exist; the journal's `watch-event` line names every action a kind's editor journals.

A file names a kind when it imports the kind's module or holds its camelCase name (`holdEvents`) as a word; a
one-word kind (`abort`, `outage`) is an ordinary word too, so for it only the import counts. Shipped profiles and
scenarios use kinds without implementing them, and are not scanned.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kube_fault_proxy.cli.reference.library import JOURNAL_RECORDS
from kube_fault_proxy.proxy.faults import KINDS, FaultSpec

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "proxy" / "kube_fault_proxy"
SCANNED = (".py", ".yaml", ".js", ".html")
NOT_SCANNED = ("fault_profiles", "scenarios")  # uses of kinds, not their implementation
PATH = re.compile(r"`([\w./<>-]+/[\w.<>-]+)`")
ACTION = re.compile(r'self\.note\("([a-z-]+)"|\baction = "([a-z-]+)"|"action": "([a-z-]+)"')


def _module(kind: type[FaultSpec]) -> str:
    return kind.__module__.rsplit(".", 1)[1]


def recipe() -> str:
    """The recipe's section of CONTRIBUTING.md."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("## Add a fault kind, end to end\n", 1)[1]
    return section.split("\n## ", 1)[0]


def resolve(path: str) -> Path:
    """A path as the recipe writes it: from the repository root for deploy/, tests/, docs/ and fault_profiles/,
    else from the package."""
    top = path.split("/", 1)[0]
    return ROOT / path if top in ("deploy", "tests", "docs", "fault_profiles") else PACKAGE / path


def listed_files(text: str, kinds: tuple[type[FaultSpec], ...]) -> set[Path]:
    """The files the recipe lists (a `<kind>` path once per kind given), directories left out."""
    paths = {p.rstrip("/") for p in PATH.findall(text) if not p.endswith("/")}
    out = {resolve(p) for p in paths if "<kind>" not in p}
    out |= {resolve(p.replace("<kind>", _module(k))) for p in paths if "<kind>" in p for k in kinds}
    return out


def naming_files(kind: type[FaultSpec]) -> set[Path]:
    """The files outside the kind's own module that name it."""
    words = [re.escape(f"from {kind.__module__} import")]
    if kind.kind != kind.kind.lower():
        words.append(rf"\b{re.escape(kind.kind)}\b")
    pattern = re.compile("|".join(words))
    files = [*PACKAGE.rglob("*"), ROOT / "deploy" / "crds.yaml"]
    return {f for f in files if f.is_file() and f.suffix in SCANNED
            and not set(NOT_SCANNED) & set(f.relative_to(PACKAGE if PACKAGE in f.parents else ROOT).parts)
            and f.name != f"{_module(kind)}.py" and pattern.search(f.read_text())}


def test_the_recipe_lists_paths_and_finds_a_kind_template() -> None:
    text = "1. `proxy/faults/<kind>.py` and `deploy/crds.yaml`, then `rig/search/` (a folder); `KINDS` is no path."
    hold = next(k for k in KINDS if k.kind == "holdEvents")
    assert listed_files(text, (hold,)) == {PACKAGE / "proxy/faults/hold_events.py", ROOT / "deploy/crds.yaml"}


def test_naming_files_finds_the_registry_and_the_editors_helpers() -> None:
    hold = next(k for k in KINDS if k.kind == "holdEvents")
    found = naming_files(hold)
    assert PACKAGE / "proxy/faults/__init__.py" in found
    assert PACKAGE / "proxy/watch_signals.py" in found
    assert PACKAGE / "proxy/faults/hold_events.py" not in found


def test_every_file_the_recipe_lists_exists() -> None:
    newest = tuple(k for k in KINDS if not k.searched_by_default)  # the recipe says a new kind is drawn only by name
    assert newest
    missing = sorted(str(p.relative_to(ROOT)) for p in listed_files(recipe(), newest) if not p.exists())
    assert missing == []


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_the_recipe_lists_every_file_that_names_a_kind(kind: type[FaultSpec]) -> None:
    listed = listed_files(recipe(), KINDS)
    assert sorted(str(p.relative_to(ROOT)) for p in naming_files(kind) - listed) == []


def test_the_journal_names_every_action_a_kinds_editor_journals() -> None:
    actions = {a for path in (PACKAGE / "proxy" / "faults").glob("*.py")
               for groups in ACTION.findall(path.read_text()) for a in groups if a}
    assert {"dropped", "held", "delayed"} <= actions
    named = set(re.findall(r"`([a-z-]+)`", JOURNAL_RECORDS["watch-event"]))
    assert sorted(actions - named) == []
