"""The manual builds strictly (a broken link or anchor fails it, and tests show it can), the README's links and
anchors reach what exists, the README fits on a page, and every page of the manual is in its nav."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import markdown
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#([^)\s]*))?\)")


def mkdocs_build(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` as scripts/test runs it (never --quiet: it drops warnings before strict counts them)."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The manual, built strictly once for this module."""
    out = tmp_path_factory.mktemp("site")
    built = mkdocs_build(ROOT, out)
    assert built.returncode == 0, built.stderr
    return out


def test_the_manual_builds_with_no_warning(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "reference" / "fault-kinds" / "index.html").is_file()


def _copy_of_the_manual(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", project / "docs")
    return project


# (what is appended to docs/concepts/faults.md, what MkDocs' warning says)
BROKEN = {
    "anchor": ("See [the search command](../reference/cli.md#search).",
               "contains a link '../reference/cli.md#search', but the doc 'reference/cli.md' does not contain an "
               "anchor '#search'"),
    "link": ("See [the search guide](../guides/no-such-page.md).",
             "contains a link '../guides/no-such-page.md', but the target 'guides/no-such-page.md' is not found"),
}


@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_broken_link_or_anchor_fails_the_strict_build(tmp_path: Path, broken: str) -> None:
    """The check can fail: the same build on a copy of the manual with one broken link or anchor exits non-zero."""
    line, warning = BROKEN[broken]
    project = _copy_of_the_manual(tmp_path)
    page = project / "docs" / "concepts" / "faults.md"
    page.write_text(page.read_text() + f"\n{line}\n")
    built = mkdocs_build(project, tmp_path / "site")
    assert built.returncode == 1, built.stderr
    assert f"Doc file 'concepts/faults.md' {warning}" in built.stderr
    assert "Aborted with 1 warnings in strict mode!" in built.stdout


class _Ids(HTMLParser):
    """Every id attribute of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.ids |= {value for name, value in attrs if name == "id" and value}


def _ids_in_html(html: str) -> set[str]:
    parser = _Ids()
    parser.feed(html)
    return parser.ids


def anchors(target: Path, site: Path) -> set[str]:
    """The anchors a Markdown file has: a page of the manual as MkDocs built it, any other file as Python-Markdown's
    table of contents names its headings (the same rule MkDocs uses)."""
    docs = ROOT / "docs"
    if target.is_relative_to(docs):
        page = target.relative_to(docs).with_suffix("")
        built = site / (page.parent if page.name == "index" else page) / "index.html"
        return _ids_in_html(built.read_text(encoding="utf-8"))
    html = markdown.markdown(target.read_text(encoding="utf-8"), extensions=["toc", "attr_list"])
    return _ids_in_html(html)


def test_the_readme_fits_on_a_page() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_the_readme_links_reach_files_and_anchors_that_exist(site: Path) -> None:
    links = [(t, a) for t, a in LINK.findall((ROOT / "README.md").read_text()) if "://" not in t]
    assert links
    assert [t for t, _ in links if not (ROOT / t).exists()] == []
    assert [f"{t}#{a}" for t, a in links if a and a not in anchors(ROOT / t, site)] == []


@pytest.mark.parametrize(("target", "anchor", "found"), [
    ("docs/reference/cli.md", "kube-fault-proxy-search", True),
    ("docs/reference/cli.md", "search", False),
    ("docs/reference/index.md", "reference", True),
    ("docs/index.md", "no-such-heading", False),
])
def test_anchors_of_the_manual_are_read_from_the_built_page(site: Path, target: str, anchor: str,
                                                             found: bool) -> None:
    assert (anchor in anchors(ROOT / target, site)) is found


def test_anchors_of_other_files_are_their_headings(site: Path, tmp_path: Path) -> None:
    other = tmp_path / "NOTES.md"
    other.write_text("# Notes\n\n## Add a fault kind, end to end\n\n## Custom {#own-id}\n")
    assert anchors(other, site) == {"notes", "add-a-fault-kind-end-to-end", "own-id"}


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
