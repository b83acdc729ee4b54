"""Nothing the code knows is listed by hand without a check: the manual's fault kinds, invariants and profile count
are compared here with the registries (faults.KINDS, the invariant catalogue, the shipped library)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kube_fault_proxy import shipped
from kube_fault_proxy.proxy.faults import KINDS
from kube_fault_proxy.proxy.profiles.library import load_dir
from kube_fault_proxy.rig.invariants.catalogue import CATALOGUE, CONDITION_INVARIANTS, CONTROLLER_INVARIANTS, KNOWN

ROOT = Path(__file__).resolve().parents[2]
CONCEPTS = ROOT / "docs" / "concepts"
GROUPS = {k.search_group for k in KINDS}
TICKED = re.compile(r"`([^`]+)`")


def group(name: str) -> list[str]:
    """The kinds of one search group, in the registry's order."""
    return [k.kind for k in KINDS if k.search_group == name]


def tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table of a page: its rows (header first, the --- line left out), each a list of cells."""
    found: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not all(set(c) <= set("-: ") for c in cells):
                current.append(cells)
        elif current:
            found.append(current)
            current = []
    return found


def kind_tables(page: Path) -> list[list[str]]:
    """The fault kinds each table of the page lists whose first column is `kind`, one list per table."""
    return [[TICKED.findall(row[0])[0] for row in table[1:]]
            for table in tables(page.read_text(encoding="utf-8")) if table[0][0].lower() == "kind"
            and all(TICKED.match(row[0]) for row in table[1:])]


def test_tables_are_read_as_written() -> None:
    text = "| kind | x |\n|---|---|\n| `abort` | a \\| b |\n| `reset` | — |\n\nprose\n\n| kind | y |\n|---|---|\n"
    assert tables(text) == [[["kind", "x"], ["`abort`", "a \\| b"], ["`reset`", "—"]], [["kind", "y"]]]


def test_the_readme_names_every_fault_kind_in_the_registrys_order() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    profile = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    lines = profile.split("      fault:\n", 1)[1].splitlines()
    first, rest = lines[0], [line.strip() for line in lines[1:] if line.strip().startswith("#")]
    named = [first.strip().split(":", 1)[0]]
    comment = " ".join([first.split("#", 1)[1], *(line.lstrip("#") for line in rest)]).strip()
    named += [word.strip() for word in comment.removeprefix("or ").split(",")]
    assert named == [k.kind for k in KINDS]


def test_the_faults_page_has_one_table_per_group_listing_the_whole_group() -> None:
    listed = kind_tables(CONCEPTS / "faults.md")
    assert sorted(map(sorted, listed)) == sorted(sorted(group(g)) for g in GROUPS)


def test_the_watch_views_page_lists_every_view_kind() -> None:
    [listed] = kind_tables(CONCEPTS / "watch-views.md")
    assert sorted(listed) == sorted(group("view"))


def test_the_view_faults_page_names_the_view_kinds_it_leaves_to_watch_views() -> None:
    page = (CONCEPTS / "view-faults.md").read_text(encoding="utf-8")
    [detailed] = kind_tables(CONCEPTS / "view-faults.md")
    assert set(detailed) < set(group("view"))
    assert [k for k in group("view") if f"`{k}`" not in page] == []
    assert "(watch-views.md)" in page


@pytest.mark.parametrize("page", sorted(CONCEPTS.glob("*.md")), ids=lambda p: p.name)
def test_every_kind_a_concepts_table_lists_is_registered(page: Path) -> None:
    known = {k.kind for k in KINDS}
    listed = [kind for table in kind_tables(page) for kind in table]
    assert [k for k in listed if k not in known] == []
    assert len(listed) == len(set(listed)), "a kind listed twice on one page"


def _invariant_rows(page: Path, header: str) -> list[tuple[str | None, str]]:
    [table] = [t for t in tables(page.read_text(encoding="utf-8")) if t[0][0] == header]
    rows = []
    for row in table[1:]:
        words = TICKED.findall(row[0])
        rows.append((words[0], words[1]) if len(words) == 2 else (None, words[0]))
    return rows


def test_the_invariants_page_lists_the_catalogue_with_its_aliases() -> None:
    rows = _invariant_rows(CONCEPTS / "invariants.md", "invariant (alias, name)")
    assert rows == [(i.alias, i.name) for i in CATALOGUE]


def test_the_controller_invariants_page_lists_the_controllers_promises() -> None:
    rows = _invariant_rows(CONCEPTS / "controller-invariants.md", "invariant")
    assert rows == [(None, i.name) for i in CONTROLLER_INVARIANTS]
    page = (CONCEPTS / "controller-invariants.md").read_text(encoding="utf-8")
    assert [i.name for i in CONDITION_INVARIANTS if f"`{i.name}`" not in page] == []


def _manual() -> list[Path]:
    """README and the manual's instructions (the records are dated measurements, kept as they were taken)."""
    docs = [p for p in (ROOT / "docs").rglob("*.md") if "records" not in p.parts]
    return [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *docs]


def test_every_invariant_alias_the_manual_names_is_in_the_catalogue() -> None:
    aliases = {i.alias for i in KNOWN.values() if i.alias}
    assert aliases == {"I1", "I2", "I3", "I4", "I5"}
    named = {(p.relative_to(ROOT).as_posix(), a) for p in _manual()
             for a in re.findall(r"\bI\d+\b", p.read_text(encoding="utf-8"))}
    assert {(page, a) for page, a in named if a not in aliases} == set()


COUNTS = [
    # (a phrase in the manual giving a count, what the count must be)
    (re.compile(r"profiles: (\d+) from \S*fault_profiles"), lambda: len(load_dir(shipped.PROFILES))),
    (re.compile(r"\b(\d+) (?:shipped |fault )?profiles\b"), lambda: len(load_dir(shipped.PROFILES))),
    (re.compile(r"\b(\d+) (?:fault )?kinds\b"), lambda: len(KINDS)),
]


def wrong_counts(text: str) -> list[tuple[str, int]]:
    """Each count of profiles or kinds in the text that is not the registry's, with the registry's."""
    return [(match.group(0), count()) for pattern, count in COUNTS for match in pattern.finditer(text)
            if int(match.group(1)) != count()]


def test_counts_of_profiles_and_kinds_in_the_manual_are_the_registrys() -> None:
    wrong = {page.relative_to(ROOT).as_posix(): w for page in _manual() if (w := wrong_counts(page.read_text()))}
    assert wrong == {}


def test_a_stale_count_is_found() -> None:
    profiles, kinds = len(load_dir(shipped.PROFILES)), len(KINDS)
    text = f"  profiles: 13 from fault_profiles\nthe {kinds} fault kinds, {profiles} shipped profiles, 15 kinds"
    assert wrong_counts(text) == [("profiles: 13 from fault_profiles", profiles), ("15 kinds", kinds)]
