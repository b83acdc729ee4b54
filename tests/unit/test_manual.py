"""The README fits on a page and its links reach files that exist; the manual's pages are all in its nav."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_fits_on_a_page() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_the_readme_links_reach_files_that_exist() -> None:
    targets = [t for t in LINK.findall((ROOT / "README.md").read_text()) if "://" not in t]
    assert targets
    assert [t for t in targets if not (ROOT / t).exists()] == []


def _nav_pages(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [p for item in node for p in _nav_pages(item)]
    if isinstance(node, dict):
        return [p for value in node.values() for p in _nav_pages(value)]
    return []


def test_every_page_of_the_manual_is_in_the_nav() -> None:
    nav = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"])
    pages = sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md"))
    assert sorted(nav) == pages


def test_every_code_fence_in_the_manual_is_closed() -> None:
    for page in (ROOT / "docs").rglob("*.md"):
        fences = [line for line in page.read_text().splitlines() if line.lstrip().startswith("```")]
        assert len(fences) % 2 == 0, page.relative_to(ROOT)
