"""`profiles validate|list`."""

from __future__ import annotations

import argparse
import sys

from proxy.cli.main import OK, USAGE
from proxy.library import load_dir
from proxy.profile_loader import ProfileError, load_file


def run(args: argparse.Namespace) -> int:
    """Validate files or list a directory."""
    if args.profiles_command == "validate":
        status = OK
        for path in args.files:
            try:
                profile = load_file(path)
            except ProfileError as e:
                print(e, file=sys.stderr)
                status = USAGE
                continue
            print(f"{path}: ok ({profile.name}, {len(profile.spec.rules)} rules)")
        return status
    try:
        entries = load_dir(args.dir)
    except ProfileError as e:
        print(e, file=sys.stderr)
        return USAGE
    width = max((len(n) for n in entries), default=4)
    for name, entry in sorted(entries.items()):
        first = (entry.profile.metadata.description.strip().splitlines() or [""])[0]
        print(f"{name:<{width}}  {len(entry.profile.spec.rules):>2} rules  {first}")
    return OK
