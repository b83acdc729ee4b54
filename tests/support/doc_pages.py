"""The manual's command blocks, read by Sybil: each with the marker that says whether a test runs it.

A command block is a fenced block in `sh`, `bash`, `shell` or `console`. The HTML comment right above it says
what happens to it:

- `<!-- run -->`: a test runs it with bash; it must exit 0, and a `text` block right after it is its output,
  compared with what it printed (see `matches`);
- `<!-- run: background -->`: the same, for a command that keeps running (a server): started in the
  background, its output compared once it has printed as many lines as the page shows, stopped at the end;
- `<!-- not-run: REASON -->`: not executed, for the reason given (a cluster build, minutes of work, …).

A `text` block after a command block is its output; one whose command is not run carries a marker of its own:
`<!-- generated: NAME -->` when a test renders it from recorded data and compares (`NAME` says which), or
`<!-- not-run: REASON -->`. Sybil parses the pages; the checks and the runner are in tests/unit/test_doc_blocks.py
and tests/integration/test_quick_start.py.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sybil import Document, Region, Sybil
from sybil.parsers.markdown.lexers import DirectiveInHTMLCommentLexer, FencedCodeBlockLexer
from sybil.typing import Evaluator

ROOT = Path(__file__).resolve().parents[2]
COMMAND_LANGUAGES = frozenset({"sh", "bash", "shell", "console"})
OUTPUT_LANGUAGE = "text"
MARKERS = ("run", "not-run", "generated")
# The pages whose command blocks are all accounted for (run, or marked not run with a reason).
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs/getting-started").glob("*.md"),
                *(ROOT / "docs/guides").glob("*.md")])
ELLIPSIS = "…"  # in a shown output: any text within one line (a time, a path, a version that varies)


@dataclass(frozen=True)
class Marker:
    """An HTML comment's directive (`run`, `not-run`, `generated`) and what follows its colon."""

    directive: str
    arguments: str


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, its text, the marker right above it, and where it is."""

    language: str
    source: str
    marker: Marker | None
    path: Path
    line: int

    @property
    def is_command(self) -> bool:
        return self.language in COMMAND_LANGUAGES

    @property
    def where(self) -> str:
        shown = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{shown}:{self.line}"


def _blocks(document: Document, evaluator: Evaluator | None = None) -> Iterable[Region]:
    """A Region per fenced block, carrying a Block; markers are the HTML comments that end just above one."""
    markers = [(r.start, Marker(r.lexemes["directive"], r.lexemes["arguments"].strip()))
               for r in DirectiveInHTMLCommentLexer("|".join(MARKERS))(document)]
    for region in FencedCodeBlockLexer(r"[\w-]*")(document):
        above = None
        for start, marker in markers:  # the comment must end on the line right above the fence
            between = document.text[start:region.start]
            if start < region.start and re.fullmatch(r"[ \t]*<!--[^\n]*-->[ \t]*\n[ \t]*", between):
                above = marker
        line = document.text.count("\n", 0, region.start) + 1
        region.parsed = Block(region.lexemes["language"], str(region.lexemes["source"]), above,
                              Path(document.path), line)
        region.evaluator = evaluator
        yield region


def parse(path: Path, evaluator: Evaluator | None = None) -> Document:
    """The page as a Sybil document whose examples are its fenced blocks (each evaluated by `evaluator`)."""
    return Sybil(parsers=[functools.partial(_blocks, evaluator=evaluator)]).parse(path)


def blocks(path: Path) -> list[Block]:
    """The page's fenced blocks, in order."""
    return [example.parsed for example in parse(path)]


def output_after(page: list[Block], block: Block) -> Block | None:
    """The `text` block right after a command block (its shown output), if there is one."""
    i = page.index(block)
    if i + 1 < len(page) and page[i + 1].language == OUTPUT_LANGUAGE and page[i + 1].marker is None:
        return page[i + 1]
    return None


def _pattern(shown_line: str) -> re.Pattern[str]:
    return re.compile("".join(".*?" if part == ELLIPSIS else re.escape(part)
                              for part in re.split(f"({ELLIPSIS})", shown_line)) + r"\Z")


def mismatches(shown: str, printed: str, home: str) -> list[str]:
    """Where a shown output differs from what was printed, line by line ([] when they match). The home
    directory prints as `~`; `…` in a shown line matches any text within that line."""
    got = printed.replace(home, "~").rstrip("\n").splitlines()
    want = shown.rstrip("\n").splitlines()
    problems = [f"line {n}: shown {w!r}, printed {g!r}" for n, (w, g) in enumerate(zip(want, got, strict=False), 1)
                if not _pattern(w).match(g)]
    if len(want) != len(got):
        problems.append(f"{len(want)} lines shown, {len(got)} printed:\n" + "\n".join(got))
    return problems


def demo_summary(report: Path) -> str:
    """The side-by-side table of a recorded demo run (its report.json), as `kube-fault-proxy report DIR` and the
    demo print it: the same function renders both."""
    from kube_fault_proxy.rig.runs.report import write_summary_text

    runs = json.loads(report.read_text())["runs"]
    return "\n".join(line for line in write_summary_text(runs).splitlines()
                     if line.startswith("|")).split("\n\n")[0] + "\n"


GENERATORS = {"demo-summary": demo_summary}  # `<!-- generated: NAME PATH -->` in a page: NAME(ROOT / PATH)


def generated(block: Block) -> str:
    """What a `generated: NAME PATH` block should hold, rendered afresh."""
    assert block.marker is not None
    name, _, source = block.marker.arguments.partition(" ")
    return GENERATORS[name](ROOT / source.split()[0])


def write_generated(pages: list[Path]) -> list[Path]:
    """Regenerate every `generated: NAME PATH` block of these pages whose NAME renders offline; the pages changed."""
    changed = []
    for page in pages:
        text = page.read_text()
        for block in reversed(blocks(page)):
            name = block.marker.arguments.split(" ")[0] if block.marker and block.marker.directive == "generated" \
                else None
            if name in GENERATORS and block.source != (fresh := generated(block)):
                lines = text.splitlines(keepends=True)
                lines[block.line:block.line + len(block.source.splitlines())] = [fresh]
                text = "".join(lines)
        if text != page.read_text():
            page.write_text(text)
            changed.append(page)
    return changed


if __name__ == "__main__":  # python -m tests.support.doc_pages --write: regenerate the pages' generated outputs
    import sys

    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.support.doc_pages --write")
    for path in write_generated(PAGES):
        print(f"rewrote {path.relative_to(ROOT)}")
