"""`search orders DIR`: a stored case replayed under N event orders after K clean runs of its workload; more than
one distinct end state, once masked, is the nondeterminism finding (rig/search/orders.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kube_fault_proxy.cli.exits import FAILED, OK, USAGE
from kube_fault_proxy.rig.cluster.record import default_state_dir
from kube_fault_proxy.rig.console import stderr_console
from kube_fault_proxy.rig.search import differential, orders, replaying
from kube_fault_proxy.rig.search.trial import confirm_tier

NO_VERDICT = 3  # the clean runs were not clean, or an order failed: nothing was compared


def add_arguments(ssub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The `search orders` action."""
    r = ssub.add_parser("orders", help="replay a search directory's case under N event orders (the draws of its "
                                       "delayEvents and holdEvents rules) and count the distinct end states")
    r.add_argument("directory", type=Path, help="a search's output directory, or one finding's")
    r.add_argument("--trial", metavar="NAME", help="that trial of trials.jsonl instead of the minimal case")
    r.add_argument("--orders", type=int, default=5, metavar="N", help="event orders to run (default 5, at least 2)")
    r.add_argument("--clean", type=int, default=differential.MIN_CLEAN_RUNS, metavar="K",
                   help=f"clean runs of the workload that learn the mask (default and least "
                        f"{differential.MIN_CLEAN_RUNS})")
    r.add_argument("--nodes", type=int, help="on a control plane of this many nodes (default: the search's)")
    r.add_argument("--json", type=Path, metavar="FILE", help="where the runs and the verdict go (default "
                                                             "DIR/orders.json)")
    r.add_argument("--profiles", type=Path, metavar="DIR", help="profile library (default: ./fault_profiles if it "
                                                                "exists, else the shipped one)")
    r.add_argument("--state-dir", type=Path, help="where the control plane lives")


def run(args: argparse.Namespace) -> int:
    """Load the case (refused before any cluster when nothing in it draws an order), run, print, write."""
    say = stderr_console().print
    if args.orders < 2 or args.clean < differential.MIN_CLEAN_RUNS or (args.nodes is not None and args.nodes < 1):
        print(f"kube-fault-proxy search orders: --orders must be at least 2, --clean at least "
              f"{differential.MIN_CLEAN_RUNS}, --nodes at least 1", file=sys.stderr)
        return USAGE
    try:
        doc, genome = replaying.load_case(args.directory, args.trial)
        orders.reordered(genome, 1)
    except ValueError as e:  # CaseError, a ProfileError of the stored case, nothing to reorder
        print(f"kube-fault-proxy search orders: {e}", file=sys.stderr)
        return USAGE
    nodes = args.nodes or int(doc["nodes"])
    if args.nodes is not None:
        genome = genome.with_(nodes=None)  # every node of the fresh control plane schedulable
    state = args.state_dir or default_state_dir().parent / "search-orders"
    say(f"{args.clean} clean runs, then {args.orders} event orders: {len(genome.rules)} rules, {genome.pods} pods "
        f"on {genome.nodes or nodes} of {nodes} nodes", markup=False)
    with replaying.case_rig(doc, genome, state, args.profiles, nodes) as rig:
        out = orders.run_orders(rig, genome, args.orders, args.clean, confirm_tier(doc["scheduler"]),
                                lambda m: say(m, markup=False))
    (args.json or args.directory / "orders.json").write_text(json.dumps(out.as_dict(), indent=1) + "\n")
    for r in out.runs:
        print(f"  {r.name}: end state {out.state_of(r) or '-'}; broke {', '.join(r.broken) or 'nothing'}"
              + (f" ({r.error})" if r.error else ""))
    print(f"{out.verdict}: {len(out.distinct)} distinct end states over {len(out.runs)} orders"
          + (f", {len(out.baseline.masked)} facts masked by {len(out.clean)} clean runs" if out.baseline else ""))
    for fact, values in out.differing.items():
        print(f"  {fact}: {' | '.join(str(v) for v in values)}")
    if out.verdict == orders.NONDETERMINISTIC:
        return FAILED
    return OK if out.verdict == orders.ONE_END_STATE else NO_VERDICT
