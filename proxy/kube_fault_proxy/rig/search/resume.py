"""Resuming a search from its trials.jsonl: the trials an earlier run of the same search (same output directory,
scheduler and seed) recorded are served back by name instead of being run again, so the search redraws the same
trials, rebuilds the same corpus and continues at the first trial it has no record of."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kube_fault_proxy.rig.search.genome import Genome
from kube_fault_proxy.rig.search.trial import TrialResult


class ResumeError(ValueError):
    """The records cannot belong to this search (a search trial drew another profile)."""


def search_step(name: str) -> bool:
    """Whether a trial's name is a search step's own run (`t12`, `c9`, a planned search's `p3`), whose profile follows
    from the seed (and a plan's reference run)."""
    return name[:1] in "tcp" and name[1:].isdigit()


def read(journal: Path) -> list[dict[str, Any]]:
    """Every whole line of a trials.jsonl (a line cut by a `kill -9` is dropped, and cut from the file)."""
    if not journal.exists():
        return []
    text = journal.read_text()
    lines, out, keep = text.splitlines(keepends=True), [], 0
    for line in lines:
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            break
        if not line.endswith("\n") or not isinstance(doc, dict):
            break
        out.append(doc)
        keep += len(line)
    if keep != len(text):
        with journal.open("r+") as f:
            f.truncate(len(text[:keep].encode()))
    return out


class Records:
    """The trials an earlier run recorded, served once each by name."""

    def __init__(self, lines: list[dict[str, Any]]) -> None:
        self.by_name: dict[str, dict[str, Any]] = {}
        for line in lines:
            self.by_name[str(line["name"])] = line
        self.served = 0  # search steps served from the records
        self.seconds = 0.0  # the trial seconds of every record served (spent by the earlier run)

    def __len__(self) -> int:
        return len(self.by_name)

    def take(self, name: str, scheduler: str, genome: Genome) -> tuple[TrialResult, str | None] | None:
        """The recorded result of this trial and the build it ran on, if the earlier run had it; ResumeError when
        a search step's record drew another profile. A record of a later phase (a shrink candidate) that differs
        is run again."""
        line = self.by_name.get(name)
        if line is None:
            return None
        if line.get("digest") != genome.digest() or line.get("scheduler") != scheduler:
            if search_step(name):
                raise ResumeError(f"its trial {name} was drawn as another profile ({line.get('digest')}, here "
                                  f"{genome.digest()}): another version or other --kinds, --shapes or --pods")
            return None
        del self.by_name[name]
        self.served += search_step(name)
        self.seconds += float(line.get("seconds", 0.0))
        return TrialResult.from_dict(line, genome.with_(origin=str(line.get("origin", genome.origin)))), \
            line.get("build")


def open_journal(journal: Path, seed: int, scheduler: str, fresh: bool, note: Callable[[str], None]) -> Records:
    """The records to resume from (the file kept, appended to), or none (the file emptied): a search resumes
    when the directory's trials.jsonl was written by a search of the same scheduler and seed."""
    lines = [] if fresh else read(journal)
    if lines and all(line.get("searchSeed") == seed for line in lines) and lines[0].get("scheduler") == scheduler:
        records = Records(lines)
        steps = sum(1 for name in records.by_name if search_step(name))
        note(f"resuming from {journal}: {len(lines)} trials recorded ({steps} search steps); they are not run again")
        return records
    if lines:
        note(f"{journal} holds another search (another seed or scheduler): starting over")
    journal.parent.mkdir(parents=True, exist_ok=True)
    journal.write_text("")
    return Records([])
