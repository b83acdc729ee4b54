"""The glossary defines every invariant the registry knows, by name and alias (the meaning is the glossary's
prose, from the registry when written); its kind lists follow the registry; the guides index lists every guide."""

from __future__ import annotations

import re
from pathlib import Path

from kube_fault_proxy.proxy.faults import KINDS
from kube_fault_proxy.rig.invariants.catalogue import KNOWN, Invariant

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def row(inv: Invariant) -> str:
    """The start of the glossary's table row for one invariant: its alias and its name (its meaning follows)."""
    alias = f"`{inv.alias}`" if inv.alias else ""
    return f"| {alias} | `{inv.name}` | "


def undefined(glossary: str) -> list[str]:
    """The invariants (by label) with no row in the glossary, or a row whose meaning is empty."""
    rows = [line for line in glossary.splitlines() if line.startswith("| ")]
    return [inv.label for inv in KNOWN.values()
            if not any(line.startswith(row(inv)) and len(line) > len(row(inv)) + 10 for line in rows)]


def test_the_glossary_defines_every_invariant_the_registry_knows() -> None:
    assert undefined((DOCS / "glossary.md").read_text()) == []


def test_a_glossary_without_an_alias_or_a_name_fails() -> None:
    text = (DOCS / "glossary.md").read_text()
    i2, stranded = KNOWN["I2"], KNOWN["stranded"]
    assert undefined(text.replace(row(i2), row(i2).replace("`I2`", ""))) == ["I2 no-phantom-allocation"]
    assert undefined(text.replace(row(stranded), "| | `stranded-pods` | ")) == ["stranded"]
    assert len(undefined("")) == len(KNOWN) > 20


def test_the_glossary_names_i1_to_i5() -> None:
    text = (DOCS / "glossary.md").read_text()
    assert all(f"`I{n}`" in text for n in range(1, 6))


def _entry(text: str, term: str) -> str:
    """A glossary entry's paragraph, from its bold term to the next blank line."""
    return text.split(f"**{term}** — ", 1)[1].split("\n\n", 1)[0]


def test_the_glossary_lists_the_request_and_view_kinds_as_the_registry_groups_them() -> None:
    text = (DOCS / "glossary.md").read_text()
    request = _entry(text, "fault kind").split("Request kinds answer a\nrequest", 1)[1].split(";", 1)[0]
    for group, words in (("request", request), ("view", _entry(text, "view fault"))):
        named = set(re.findall(r"`([a-zA-Z]+)`", words))
        assert named == {k.kind for k in KINDS if k.search_group == group}, group


def test_the_guides_index_lists_every_guide_once() -> None:
    index = (DOCS / "guides" / "index.md").read_text()
    linked = re.findall(r"\]\(([\w-]+\.md)\)", index)
    guides = sorted(p.name for p in (DOCS / "guides").glob("*.md") if p.name != "index.md")
    assert sorted(linked) == guides
