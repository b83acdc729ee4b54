"""`search rejudge PATH...`: stored searches (their search.json) re-judged by today's ledger and classification
(rig/search/rejudge.py); the before/after table and, for each hit only runs can settle, a directory to replay
(rig/search/rejudged_report.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kube_fault_proxy.cli.exits import OK, USAGE
from kube_fault_proxy.proxy.profiles.problems import ProfileError
from kube_fault_proxy.rig.search import known, rejudge, rejudged_report


def add_arguments(ssub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The `search rejudge` action."""
    r = ssub.add_parser("rejudge", help="re-judge stored searches (search.json) by today's ledger and "
                                        "classification; print the before/after table (no cluster)")
    r.add_argument("paths", type=Path, nargs="+", metavar="PATH",
                   help="a search's output directory or its search.json (a finding's too); several are one table")
    r.add_argument("--controls", type=int, default=3, metavar="N",
                   help="clean control runs a confirmed hit needs (default 3, as `search --controls`); a stored hit "
                        "kept one")
    r.add_argument("--known", type=Path, action="append", metavar="FILE",
                   help="a known-findings catalogue of your own, added to the shipped one (repeatable)")
    r.add_argument("--hits", action="store_true", help="also list, per search, each hit whose class changed or that "
                                                       "only runs can settle, with why")
    r.add_argument("--json", type=Path, metavar="FILE", help="also write every hit's verdicts, before and after")
    r.add_argument("--write-replays", type=Path, metavar="DIR",
                   help="write, per search (DIR/<n>-<name>/), a directory for each hit only runs can settle: "
                        "t<trial>/ replays its profile (the ledger judges each run), t<trial>-control/ runs its "
                        "control; each is run by `search replay`")


def run(args: argparse.Namespace) -> int:
    """Re-judge, print the table (and what only runs can settle), write what was asked."""
    try:
        if args.controls < 1:
            raise rejudge.RejudgeError("--controls must be at least 1")
        rules = rejudge.Rules(known.catalogue(tuple(args.known or ())), args.controls)
        docs = [rejudge.load_doc(p) for p in args.paths]
        stored = [rejudge.rejudge(doc, file, rules) for file, doc in docs]
    except (rejudge.RejudgeError, ProfileError) as e:
        print(f"kube-fault-proxy search rejudge: {e}", file=sys.stderr)
        return USAGE
    lines = ["# Stored searches re-judged", "", *rejudged_report.table(stored, Path.cwd()), ""]
    for s in stored:
        groups, more = rejudged_report.group_lines(s), rejudged_report.hit_lines(s) if args.hits else []
        if groups or more:
            lines += [f"## `{s.path}`", "", *([*groups, ""] if groups else []), *([*more, ""] if more else [])]
    replays = [s for s in stored if s.note is not None and s.note.startswith("a minimal case")]
    if replays:
        lines += ["Records that kept only a minimal case: replay it, the ledger judging each run (a cluster):", "",
                  *(f"    kube-fault-proxy search replay {s.path.parent} --times 5" for s in replays), ""]
    print("\n".join(lines))
    if args.json is not None:
        args.json.write_text(json.dumps([{"path": str(s.path), "scheduler": s.scheduler, "build": s.build,
                                          "control": s.control, "note": s.note,
                                          "hits": [h.as_dict() for h in s.hits]} for s in stored], indent=1) + "\n")
    if args.write_replays is not None:
        for i, ((_, doc), s) in enumerate(zip(docs, stored, strict=True), 1):
            made = rejudged_report.write_replays(doc, s, args.write_replays / f"{i}-{s.path.parent.name}")
            for d in made:
                times = max(args.controls - 1, 1) if d.name.endswith("-control") else 5
                print(f"kube-fault-proxy search replay {d} --times {times}")
    return OK
