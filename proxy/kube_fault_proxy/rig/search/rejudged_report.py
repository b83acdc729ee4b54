"""What `search rejudge` writes (rig/search/rejudge.py judges): the before/after table, each finding's and each
changed hit's lines, and for each hit only runs can settle a directory `search replay` runs."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kube_fault_proxy.rig.search import control as controls
from kube_fault_proxy.rig.search.genome import Genome
from kube_fault_proxy.rig.search.rejudge import CLASSES, JUDGED_EXCUSED, Rejudged, Stored, genome_of

PENDING = ("undecided", "under-controlled")  # what only runs can settle: a replay with the journal, more controls
REPLAY_FIELDS = ("nodes", "yunikornPatch", "yunikornSource", "kubeSchedulerPatch", "featureGates", "workloads",
                 "kubernetes", "build")


def replay_doc(doc: Mapping[str, Any], hit: Rejudged, genome: Genome, control: bool = False) -> dict[str, Any]:
    """A search.json that `search replay` runs: the hit's profile as the minimal case, its breaks as the target;
    with `control`, the control the search named in place of the target (a build with other gates, the other
    scheduler, the same workload without the profile, or the scheduler as released or released with the
    control's patch)."""
    out = {k: doc.get(k) for k in REPLAY_FIELDS}
    out.update(scheduler=doc["scheduler"], target=list(hit.broken), minimal=json.loads(genome.canonical()),
               rejudged={"trial": hit.trial, "before": hit.before, "after": hit.after, "control": control})
    asked = doc.get("control")
    if control and isinstance(asked, str):
        if controls.is_gates(asked):
            out["featureGates"] = controls.merged(doc.get("featureGates") or {},
                                                  controls.parse(asked, str(doc["scheduler"])))
        elif asked == "unfaulted":
            out["minimal"] = {**json.loads(genome.canonical()), "rules": []}
        elif controls.is_build(asked):  # the same scheduler, released, or released with the control's patch
            patch = controls.build_patch(asked)
            own = "yunikornPatch" if doc["scheduler"] == "yunikorn" else "kubeSchedulerPatch"
            out.update(yunikornPatch=None, yunikornSource=None, kubeSchedulerPatch=None, build=None)
            out[own] = str(patch) if patch is not None else None
        else:
            out["scheduler"] = asked
    return out


def write_replays(doc: Mapping[str, Any], stored: Stored, out: Path) -> list[Path]:
    """For each hit only runs can settle, a directory `search replay` runs (`t<trial>`), and for a hit short of
    controls one that runs its control (`t<trial>-control`); returns them."""
    genomes = {int(h["trial"]): genome_of(h["genome"], str(stored.path)) for h in doc.get("hits") or []}
    made = []
    for hit in stored.hits:
        if hit.after not in PENDING:
            continue
        for control in ((False, True) if hit.after == "under-controlled" else (False,)):
            where = out / f"t{hit.trial}{'-control' if control else ''}"
            where.mkdir(parents=True, exist_ok=True)
            (where / "search.json").write_text(json.dumps(replay_doc(doc, hit, genomes[hit.trial], control),
                                                          indent=1) + "\n")
            made.append(where)
    return made


def _cell(counts: Counter[str], name: str) -> str:
    return str(counts.get(name, 0))


def table(stored: Sequence[Stored], root: Path | None = None) -> list[str]:
    """The before/after table (markdown): per stored search, its hits by class as recorded and as re-judged."""
    head = ["| search | hits | excused by the ledger | undecided (journal not kept) | faults' effect (control "
            "broke the same) | did not repeat | nothing injected | known | confirmed on too few controls | "
            "confirmed | the ledger blind: cut connections |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = []
    for s in stored:
        name = str(s.path.relative_to(root)) if root is not None and s.path.is_relative_to(root) else str(s.path)
        if s.note is not None:
            rows.append(f"| `{name}` | {s.note} | | | | | | | | | |")
            continue
        for when, counts in (("before", s.before()), ("after", s.after())):
            rows.append(f"| `{name}` {when} | {len(s.hits)} | " + " | ".join(
                _cell(counts, c) for c in CLASSES) + f" | {s.blind() if when == 'after' else '-'} |")
    return [*head, *rows]


def group_lines(s: Stored) -> list[str]:
    """The findings (groups) the record reported, and whether each survives."""
    if not s.groups:
        return []
    lines = ["| # | signature | trials | minimal case reproduced | re-judged |", "|---|---|---|---|---|"]
    for i, g in enumerate(s.groups, 1):
        rate = f"{g.reproduced}/{g.replays}" if g.replays else "not shrunk"
        lines.append(f"| {i} | {'; '.join(g.signature)} | {', '.join(map(str, g.trials))} | {rate} | "
                     f"{g.verdict(s.hits)} |")
    return lines


def _short(text: str, most: int = 400) -> str:
    """A table cell: no pipes, at most `most` characters (a journal's text lists every pod)."""
    text = text.replace("|", "/")
    return text if len(text) <= most else text[:most - 1].rstrip() + "…"


def hit_lines(s: Stored) -> list[str]:
    """Every hit of one stored search whose class changed, or that only runs can settle, with why."""
    changed = [h for h in s.hits if h.after != ("excused" if h.before in JUDGED_EXCUSED else h.before)
               or h.after in PENDING]
    if not changed:
        return []
    lines = ["| trial | broke | before | after | why |", "|---|---|---|---|---|"]
    lines += [f"| {h.trial} | {', '.join(h.broken)} | {h.before} | **{h.after}** | {_short(h.why)} |"
              for h in changed]
    return lines
