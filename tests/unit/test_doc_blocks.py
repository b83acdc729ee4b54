"""Every command block in README, Getting started and the guides is run by a test or marked not run with a
reason (tests/support/doc_pages.py says how); the check itself fails on a page that breaks the rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.doc_pages import (
    COMMAND_LANGUAGES,
    GENERATORS,
    OUTPUT_LANGUAGE,
    PAGES,
    ROOT,
    Block,
    blocks,
    generated,
    mismatches,
    write_generated,
)
from tests.unit.test_report import a_run

# The pages whose `run` blocks a test executes, and the test that does.
RUN_BY = {ROOT / "docs/getting-started/quick-start.md": ROOT / "tests/integration/test_quick_start.py"}
# The outputs a test renders (or captures) and compares: `<!-- generated: NAME -->`, by NAME.
GENERATED = {"serve-banner": ROOT / "tests/integration/test_quick_start.py",
             "demo-summary": ROOT / "tests/unit/test_doc_blocks.py"}


def problems(page: Path) -> list[str]:
    """What is wrong with one page's blocks."""
    found = []
    page_blocks = blocks(page)
    for i, block in enumerate(page_blocks):
        if not block.language:
            found.append(f"{block.where}: a fenced block with no language (commands are {sorted(COMMAND_LANGUAGES)}"
                         f", outputs and pictures {OUTPUT_LANGUAGE})")
        if block.marker is not None and block.marker.directive == "generated":
            name = block.marker.arguments.split(" ", 1)[0]
            if name not in GENERATED or name not in GENERATED[name].read_text():
                found.append(f"{block.where}: `generated: {name}`: no test generates {name!r} (GENERATED)")
        if not block.is_command:
            continue
        marker = block.marker
        if marker is None:
            found.append(f"{block.where}: a command block neither run nor marked: put `<!-- run -->` or "
                         f"`<!-- not-run: REASON -->` on the line above it")
        elif marker.directive == "not-run" and not marker.arguments:
            found.append(f"{block.where}: `not-run` without a reason")
        elif marker.directive == "run" and page not in RUN_BY:
            found.append(f"{block.where}: marked `run`, but no test runs {page.name} (tests/unit/test_doc_blocks.py"
                         f" RUN_BY)")
        elif marker.directive == "run" and marker.arguments not in ("", "background"):
            found.append(f"{block.where}: `run: {marker.arguments}`: only `run` and `run: background` exist")
        elif marker.directive not in ("run", "not-run"):
            found.append(f"{block.where}: `{marker.directive}` is for outputs, not commands")
        after = page_blocks[i + 1] if i + 1 < len(page_blocks) else None
        if (marker is not None and marker.directive == "not-run" and after is not None
                and after.language == OUTPUT_LANGUAGE and _directly_after(page, block, after)
                and after.marker is None):
            found.append(f"{after.where}: the output of a command that is not run, unmarked: generate it "
                         f"(`<!-- generated: NAME -->`) or mark it `<!-- not-run: REASON -->`")
    return found


def _directly_after(page: Path, block: Block, after: Block) -> bool:
    """Whether only blank lines and a marker separate a command block from the next block."""
    lines = page.read_text().splitlines()[block.line + len(block.source.splitlines()) + 1:after.line - 1]
    return all(not line.strip() or line.lstrip().startswith("<!--") for line in lines)


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_command_block_is_run_or_marked(page: Path) -> None:
    assert problems(page) == []


def test_the_pages_have_command_blocks_and_some_are_run() -> None:
    every = [b for page in PAGES for b in blocks(page) if b.is_command]
    assert len(every) > 30
    assert sum(1 for b in every if b.marker and b.marker.directive == "run") >= 6
    assert all(test.exists() for test in RUN_BY.values())


@pytest.mark.parametrize(("text", "expected"), [
    ("```sh\nls\n```\n", "neither run nor marked"),
    ("<!-- not-run: -->\n```sh\nls\n```\n", "without a reason"),
    ("<!-- run -->\n```sh\nls\n```\n", "no test runs"),
    ("```\nls\n```\n", "no language"),
    ("<!-- not-run: a cluster -->\n```sh\nls\n```\n\n```text\nout\n```\n", "the output of a command that is not run"),
    ("<!-- not-run: a cluster -->\n\n```sh\nls\n```\n", "neither run nor marked"),  # a blank line parts them
    ("<!-- generated: nobody-makes-this -->\n```text\nout\n```\n", "no test generates"),
])
def test_the_check_fails_on_a_page_that_breaks_the_rule(tmp_path: Path, text: str, expected: str) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n" + text)
    found = problems(page)
    assert any(expected in p for p in found), found


def test_a_marked_block_with_a_reason_passes(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n<!-- not-run: needs a cluster -->\n```sh\nls\n```\n\n"
                    "<!-- not-run: from a cluster run -->\n```text\nout\n```\n")
    assert problems(page) == []


@pytest.mark.parametrize(("shown", "printed", "same"), [
    ("a\nb\n", "a\nb\n", True),
    ("seed …\n", "seed 123\n", True),
    ("trust: ~/x\n", "trust: /tmp/h/x\n", True),
    ("500\n201\n", "201\n201\n", False),
    ("a\n", "a\nb\n", False),
    ("a …\n", "b 1\n", False),
])
def test_shown_output_is_compared_line_by_line(shown: str, printed: str, same: bool) -> None:
    assert (mismatches(shown, printed, "/tmp/h") == []) is same


def _generated_blocks(pages: list[Path]) -> list[Block]:
    return [b for page in pages for b in blocks(page)
            if b.marker and b.marker.directive == "generated" and b.marker.arguments.split(" ")[0] in GENERATORS]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_generated_outputs_are_what_their_generator_renders(page: Path) -> None:
    """`python -m tests.support.doc_pages --write` rewrites them from the recorded data."""
    for block in _generated_blocks([page]):
        assert block.source == generated(block), f"{block.where}: stale; run python -m tests.support.doc_pages --write"


def test_the_demo_summary_is_rendered_from_a_recorded_run_and_a_stale_one_is_rewritten(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import tests.support.doc_pages as doc_pages

    monkeypatch.setattr(doc_pages, "ROOT", tmp_path)
    binds = {"succeeded": 80, "failed": 120, "committedWithoutAnswer": 50, "throttled": 9,
             "beforeOutage": {"succeeded": 40}}
    (tmp_path / "run").mkdir()
    (tmp_path / "run/report.json").write_text(json.dumps({"runs": [{**a_run(), "binds": binds, "build": "b1"}]}))
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n<!-- generated: demo-summary run/report.json -->\n```text\n| old | table |\n```\n")
    [block] = _generated_blocks([page])
    fresh = generated(block)
    assert fresh.splitlines()[0].count("|") == 13  # twelve columns, as the command prints them
    assert "| 80 (40) / 120 / 50 / 9 | 12.5 | b1 |" in fresh
    assert block.source != fresh
    assert write_generated([page]) == [page]
    [block] = _generated_blocks([page])
    assert block.source == fresh
    assert write_generated([page]) == []
