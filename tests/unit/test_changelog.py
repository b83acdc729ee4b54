"""The CHANGELOG keeps Keep a Changelog 1.1's form: its section names, no empty section, links only to tags that exist."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}  # Keep a Changelog 1.1
VERSION = re.compile(r"^## (\[Unreleased\]|\[?\d+\.\d+\.\d+\]? - \d{4}-\d{2}-\d{2})$")
TAG_IN_LINK = re.compile(r"/(?:compare/([^.\s]+)\.\.\.([^\s)]+)|releases/tag/([^\s)]+)|tree/([^\s)]+))")


def _text() -> str:
    return (ROOT / "CHANGELOG.md").read_text()


def _versions(text: str) -> dict[str, dict[str, list[str]]]:
    """Each version heading, its sections and each section's entries (`- ` lines)."""
    out: dict[str, dict[str, list[str]]] = {}
    version = section = ""
    for line in text.splitlines():
        if line.startswith("## "):
            version, section = line, ""
            out[version] = {}
        elif line.startswith("### ") and version:
            section = line[4:]
            assert section not in out[version], f"{version}: {section} twice"
            out[version][section] = []
        elif line.startswith("- ") and section:
            out[version][section].append(line)
    return out


def test_every_version_heading_has_the_form_and_every_section_a_name_of_the_form() -> None:
    versions = _versions(_text())
    assert next(iter(versions)) == "## [Unreleased]"
    for version, sections in versions.items():
        assert VERSION.match(version), version
        assert set(sections) <= SECTIONS, (version, set(sections) - SECTIONS)
        assert all(sections.values()), f"{version}: an empty section"


def test_unreleased_keeps_fixes_and_removals_apart_from_changes() -> None:
    unreleased = _versions(_text())["## [Unreleased]"]
    assert {"Added", "Changed", "Fixed", "Removed"} <= set(unreleased)
    for entry in unreleased["Changed"]:
        assert not re.search(r"\b(no longer loses|is gone|are gone|removed)\b", entry), entry


def test_a_bracketed_version_has_a_link_and_every_link_names_a_tag_that_exists() -> None:
    text = _text()
    links = dict(re.findall(r"^\[([^\]]+)\]: (\S+)$", text, re.M))
    for version in _versions(text):
        bracketed = re.match(r"## \[([^\]]+)\]", version)
        if bracketed:
            assert bracketed.group(1) in links, version
    tags = set(subprocess.run(["git", "-C", str(ROOT), "tag"], capture_output=True, text=True,
                              check=True).stdout.split())
    named = {t for url in links.values() for m in TAG_IN_LINK.finditer(url) for t in m.groups()
             if t and t not in ("HEAD", "main")}
    assert named - tags == set()
