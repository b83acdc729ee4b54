"""Every record names the commit and machine it was measured on, and every commit id it cites resolves here.

A commit of another repository is written `owner/repo@id` (`apache/yunikorn-k8shim@23b6b47f`) and is not
looked up; an id inside a name (`load-61e601b3-00020`, `...-a479e33.json`) is not a citation.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "docs" / "records"
# Hex with a letter in it, standing alone; or digits only, right after the word "commit" (`rig commit 4739961`).
COMMIT_ID = re.compile(
    r"(?<![\w./@-])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])"
    r"|(?<=commit )[0-9]{7,40}(?![\w-])"
)
MACHINE = re.compile(r"\b(machine|VM)\b")


def commit_ids(text: str) -> set[str]:
    """The commit ids a page cites."""
    return set(COMMIT_ID.findall(text))


def unresolved(ids: set[str]) -> set[str]:
    """The ids `git` cannot resolve to a commit of this repository (one `git cat-file` for all)."""
    order = sorted(ids)
    answer = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "--batch-check=%(objecttype)"],
        input="".join(f"{i}^{{commit}}\n" for i in order), capture_output=True, text=True, check=True,
    ).stdout.splitlines()
    assert len(answer) == len(order), answer
    return {i for i, kind in zip(order, answer, strict=True) if kind != "commit"}


def _records() -> list[Path]:
    return sorted(p for p in RECORDS.rglob("*.md") if p.name != "index.md")


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("at rig commit 4739961: `--seed 34`", {"4739961"}),
        ("| after | b8b8d6c | 286 s |", {"b8b8d6c"}),
        ("main (a479e33; run 2 at d0d68f9)", {"a479e33", "d0d68f9"}),
        ("apache/yunikorn-k8shim@23b6b47f, 2026-08-20", set()),
        ("pod load-61e601b3-00020 is Pending", set()),
        ("`bench/results/scheduler-yunikorn-0a0d472.json`", set()),
        ("1,000,000 requests, 2147483647 bytes", set()),
    ],
)
def test_commit_ids_are_found_where_a_record_cites_one(text: str, found: set[str]) -> None:
    assert commit_ids(text) == found


def test_an_id_that_names_no_commit_is_reported() -> None:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert unresolved({"4739961", "0badc0de", head}) == {"4739961", "0badc0de"}


def test_every_commit_a_record_cites_resolves_in_this_repository() -> None:
    cited = {(p.relative_to(RECORDS).as_posix(), i) for p in _records() for i in commit_ids(p.read_text())}
    bad = unresolved({i for _, i in cited})
    assert sorted((page, i) for page, i in cited if i in bad) == []


@pytest.mark.parametrize("page", _records(), ids=lambda p: p.relative_to(RECORDS).as_posix())
def test_every_record_names_its_commit_and_machine(page: Path) -> None:
    text = page.read_text()
    assert commit_ids(text), f"{page.name}: no commit named"
    assert MACHINE.search(text), f"{page.name}: no machine named"
