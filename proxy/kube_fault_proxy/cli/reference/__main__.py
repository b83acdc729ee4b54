"""`python -m kube_fault_proxy.cli.reference --write docs/reference` (or `--check DIR`: exit 1 if stale)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kube_fault_proxy.cli.reference import REGENERATE, stale, write


def main() -> int:
    """Write or check the reference pages."""
    p = argparse.ArgumentParser(prog="python -m kube_fault_proxy.cli.reference", description=__doc__)
    group = p.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path, metavar="DIR", help="write the pages into DIR")
    group.add_argument("--check", type=Path, metavar="DIR", help="exit 1 if a page in DIR differs from the code's")
    args = p.parse_args()
    if args.write is not None:
        for path in write(args.write):
            print(path)
        return 0
    differing = stale(args.check)
    if differing:
        print(f"stale reference pages: {', '.join(differing)}; regenerate: {REGENERATE}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
