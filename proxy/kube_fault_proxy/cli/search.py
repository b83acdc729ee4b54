"""`search` (find, confirm and shrink a fault profile that breaks an invariant) and its actions: `replay`, `rejudge`,
`orders`."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from kube_fault_proxy.cli import search_builds, search_campaign, search_orders, search_rejudge
from kube_fault_proxy.cli.exits import FAILED, OK, USAGE
from kube_fault_proxy.cli.targets import add_kubernetes_argument, feature_gate
from kube_fault_proxy.proxy.profiles.problems import ProfileError
from kube_fault_proxy.proxy.schema.strict import parse_duration
from kube_fault_proxy.rig.actions.trial_churn import ACTIONS, parse_actions
from kube_fault_proxy.rig.cluster import build
from kube_fault_proxy.rig.cluster.feature_gates import Gates
from kube_fault_proxy.rig.cluster.record import ClusterError, default_state_dir
from kube_fault_proxy.rig.console import Progress, stderr_console
from kube_fault_proxy.rig.search import control as controls
from kube_fault_proxy.rig.search import differential, known, replaying, waist
from kube_fault_proxy.rig.search.controller_trial import NAMED_ONLY_KINDS, WORKLOAD_KINDS, plan
from kube_fault_proxy.rig.search.engine import Search
from kube_fault_proxy.rig.search.grammar import ALL_KINDS, KNOWN_KINDS
from kube_fault_proxy.rig.search.on_cluster import CampaignError
from kube_fault_proxy.rig.search.outcome import UNFAULTED, Outcome, Settings
from kube_fault_proxy.rig.search.resume import ResumeError
from kube_fault_proxy.rig.search.trial import confirm_tier, run_trial
from kube_fault_proxy.rig.workloads.shapes import ALL_SHAPES, DEVICE_SHAPES, GANG_SHAPES, SHAPES

SCHEDULERS = ("yunikorn", "kube-scheduler")  # a control by another scheduler is one of these
DEFAULTS = {"nodes": 20, "pods": 100}  # a scheduler's search rig and load
CONTROLLER_DEFAULTS = {"nodes": 4, "pods": 40}  # kube-controller-manager's: a DaemonSet pod a node, ~40 pods a trial


class UsageError(Exception):
    """Flags that do not fit together."""


def _kinds(args: argparse.Namespace, target: str | None = None) -> tuple[str, ...]:
    default = "all" if getattr(args, "plan", False) or getattr(args, "plan_from", None) else ",".join(ALL_KINDS)
    asked = [k.strip() for k in (args.kinds or default).split(",") if k.strip()]
    refused = waist.of(target or "").no_kinds
    kinds = list(dict.fromkeys(k for a in asked for k in (KNOWN_KINDS if a == "all" else (a,))
                               if a != "all" or k not in refused))  # all: every kind the target's trial runs
    unknown = sorted(set(kinds) - set(KNOWN_KINDS) | set(args.exclude_kinds or []) - set(KNOWN_KINDS))
    if unknown:
        raise UsageError(f"unknown fault kind(s) {', '.join(unknown)}; known: {', '.join(KNOWN_KINDS)}")
    if set(kinds) & set(refused):
        raise UsageError(f"--kinds {', '.join(sorted(set(kinds) & set(refused)))}: not with --target {target} "
                         f"({waist.of(str(target)).refused})")
    kept = tuple(k for k in kinds if k not in set(args.exclude_kinds or []))
    if not kept:
        raise UsageError("no fault kind left to search")
    return kept


def _target(text: str) -> tuple[str, tuple[str, ...]]:
    """`--target NAME` or `kube-controller-manager:replicaset,job` -> (target, the workload kinds its trial makes)."""
    name, colon, rest = text.partition(":")
    if name not in waist.TARGETS:
        raise UsageError(f"--target {text!r}: one of {', '.join(waist.TARGETS)}")
    if colon and name != waist.CONTROLLER_MANAGER:
        raise UsageError(f"--target {text!r}: only {waist.CONTROLLER_MANAGER} takes workload kinds after a colon")
    kinds = tuple(k.strip() for k in rest.split(",") if k.strip()) if colon else WORKLOAD_KINDS
    try:
        plan(CONTROLLER_DEFAULTS["pods"], kinds)
    except ValueError as e:
        raise UsageError(f"--target {text!r}: {e}") from None
    return name, kinds


def _settings(args: argparse.Namespace) -> Settings:
    if args.scheduler is None or args.budget is None or args.output is None:
        raise UsageError("search needs --target (or --scheduler), --budget and -o DIR (or: search replay DIR)")
    args.scheduler, workloads = _target(args.scheduler)
    defaults = CONTROLLER_DEFAULTS if args.scheduler == waist.CONTROLLER_MANAGER else DEFAULTS
    args.nodes = defaults["nodes"] if args.nodes is None else args.nodes
    args.pods = defaults["pods"] if args.pods is None else args.pods
    if args.control == args.scheduler:
        raise UsageError(f"--control must be another scheduler than --scheduler (or {UNFAULTED}: the same one "
                         f"without the profile, or {controls.GATES}GATE=BOOL,...: the same build with other gates)")
    try:
        search_builds.check(args)
        gates = controls.target_gates(args.feature_gates or [], args.scheduler)
        control = _control(args.scheduler, args.control, gates)
        if controls.is_gates(control):
            changes = controls.parse(str(control), args.scheduler)
            if controls.same_as_target(gates, changes):
                raise ValueError(f"--control {control}: the target already runs with these gates; the control "
                                 "must set at least one of them otherwise")
        if controls.is_build(control):
            control = controls.parse_build(str(control), args.scheduler, search_builds.target_patch(args),
                                           args.yunikorn_source)
    except ValueError as e:
        raise UsageError(str(e)) from None
    shapes = tuple(x.strip() for x in (args.shapes or ",".join(SHAPES)).split(",") if x.strip())
    if not shapes or set(shapes) - set(ALL_SHAPES):
        raise UsageError(f"--shapes takes some of {', '.join(ALL_SHAPES)}")
    if set(shapes) & set(GANG_SHAPES) and "yunikorn" in (args.scheduler, control):
        asked = ",".join(x for x in shapes if x in GANG_SHAPES)
        raise UsageError(f"--shapes {asked}: its gangs are PodGroups, which kube-scheduler schedules; "
                         "YuniKorn's gangs are its own (task groups), so it can be neither target nor control here")
    if args.scheduler == waist.CONTROLLER_MANAGER:  # its workloads are the plan's (controller_trial.plan)
        if args.shapes:
            raise UsageError("--shapes shape a scheduler's pods; kube-controller-manager's trials make workloads "
                             "(name their kinds: --target kube-controller-manager:replicaset,job)")
        shapes = ("roomy",)
    try:  # kube-controller-manager's trials make workloads, not a scheduler's load: no action is performed there
        actions = parse_actions(args.actions, args.scheduler != waist.CONTROLLER_MANAGER, args.scheduler)
    except ValueError as e:
        raise UsageError(f"--actions {args.actions!r}: {e}") from None
    if args.plan_per_group < 1:
        raise UsageError(f"--plan-per-group {args.plan_per_group}: at least 1 point per group")
    if args.plan_from is not None and not (args.plan_from / "reference.json").is_file():
        raise UsageError(f"--plan-from {args.plan_from}: no reference.json there (an earlier `search --plan -o DIR` "
                         "writes one)")
    if (args.plan or args.plan_from is not None) and (args.worker or args.on_cluster or args.print_job):
        raise UsageError("--plan runs on this machine; it is no campaign (--workers, --on-cluster, --print-job)")
    if args.canary_every < 0:
        raise UsageError("--canary-every must be 0 (no canaries) or more")
    if args.controls < 1:
        raise UsageError(f"--controls {args.controls}: at least 1 control run (--control none: no control)")
    if args.differential and args.differential < differential.MIN_CLEAN_RUNS:
        raise UsageError(f"--differential {args.differential}: 0 (off) or at least {differential.MIN_CLEAN_RUNS} "
                         "clean runs per workload (fewer mask too little)")
    try:
        budget, shrink_budget = parse_duration(args.budget), parse_duration(args.shrink_budget)
        shrink_total = None if args.shrink_total == "none" else parse_duration(args.shrink_total)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.pods < 20 or args.nodes < 1 or args.replays < 1:
        raise UsageError("--pods must be at least 20, --nodes and --replays at least 1")
    state = args.state_dir or default_state_dir().parent / "search"
    catalogue = known.catalogue(tuple(args.known or ()))  # a bad one fails here, before anything is built
    asked = "" if args.include_known in (None, "all") else args.include_known
    as_new = tuple(i.strip() for i in asked.split(",") if i.strip())
    ids = [k.id for k in catalogue.known]
    if set(as_new) - set(ids):
        raise UsageError(f"--include-known: no known finding {', '.join(sorted(set(as_new) - set(ids)))} "
                         f"(known: {', '.join(ids)}; or `all`)")
    return Settings(scheduler=args.scheduler, control=control, budget=budget, seed=args.seed,
                    kinds=_kinds(args, args.scheduler), out=args.output, state_dir=state, profiles_dir=args.profiles,
                    nodes=args.nodes, pods=args.pods, shrink_budget=shrink_budget, shrink_total=shrink_total,
                    replays=args.replays,
                    max_trials=args.max_trials, yunikorn_patch=args.yunikorn_patch,
                    yunikorn_source=args.yunikorn_source, kube_scheduler_patch=args.kube_scheduler_patch,
                    shapes=shapes, canary_every=args.canary_every,
                    include_known=args.include_known == "all", known_as_new=as_new, known_files=tuple(args.known or ()),
                    fresh=args.fresh, feature_gates=gates, workloads=workloads, kubernetes=args.kubernetes,
                    differential=args.differential, controls=args.controls,
                    plan=args.plan or args.plan_from is not None, plan_from=args.plan_from,
                    plan_per_group=args.plan_per_group, actions=actions)


def _control(scheduler: str, asked: str | None, gates: Gates) -> str | None:
    """The control: as asked (`none`: no control run); by default, for a search with feature gates, the same
    build with each gate the other way; else kube-scheduler for a YuniKorn search and the same workload without
    the profile for a kube-scheduler search."""
    if asked == "none":
        return None
    if asked is not None:
        if asked in SCHEDULERS and scheduler == waist.CONTROLLER_MANAGER:
            raise ValueError(f"--control {asked}: a scheduler is no control for {scheduler} (use {UNFAULTED}, "
                             f"none or {controls.GATES}GATE=BOOL,...)")
        if asked not in (*SCHEDULERS, UNFAULTED) and not controls.is_gates(asked) and not controls.is_build(asked):
            raise ValueError(f"--control {asked!r}: one of {', '.join(SCHEDULERS)}, {UNFAULTED}, none, "
                             f"{controls.RELEASED}, {controls.PATCH}FILE, or {controls.GATES}GATE=BOOL,... "
                             f"(e.g. {controls.GATES}SchedulerAsyncAPICalls=false)")
        return asked
    return controls.flipped(gates, scheduler) or ("kube-scheduler" if scheduler == "yunikorn" else UNFAULTED)


def _search(args: argparse.Namespace) -> int:
    from kube_fault_proxy.rig.search.output import write

    s = _settings(args)
    if args.worker or args.on_cluster or args.print_job:
        return search_campaign.run(s, args, summary)
    search_builds.build_all(s)  # a bad patch fails here, before any trial
    console = stderr_console()
    with Progress("search trials", None, console=console) as bar:
        def progress(out: Outcome) -> None:
            minutes = (time.monotonic() - started) / 60
            broke: list[list[str]] = sorted((t.broken for t in out.trials if t.broken), key=len)
            best = ", ".join(broke[-1]) if broke else f"near miss {out.best_near_miss}"
            bar.update(len(out.trials), status=f"{len(out.trials) / minutes if minutes else 0:.1f}/min, "
                                               f"corpus {out.corpus}, best: {best}")

        started = time.monotonic()
        out = Search(s, bar.note, progress, lambda o: write(o, sys.argv)).run()  # the report: written as it goes
    return summary(out, s)


def summary(out: Outcome, s: Settings) -> int:
    """What a finished (or interrupted) search prints, and its exit code."""
    report = s.out / "report.md"
    if out.interrupted:
        print(f"interrupted by {out.interrupted} after {len(out.trials)} search trials; every process the search "
              f"started is stopped; report: {report}\ncontinue: the same command (same -o and --seed)")
        return 128 + signal.Signals[out.interrupted].value  # as a shell reports a command a signal ended
    canaries = f"{len(out.canaries)} canaries ({len(out.broken_canaries())} broke: the rig's or the workload's)"
    if s.plan:
        plan = out.plan
        print(f"the plan: {plan['pointsCovered']} of {plan['points']} points covered, {plan['distinctEndStates']} "
              f"distinct end states reached ({plan['perturbationsRun']} of {plan['perturbations']} perturbations "
              "run)" if plan is not None else f"no plan: {out.plan_error}")
    nothing = f"{out.injected_nothing} injected nothing ({out.injected_nothing_share():.0%})"
    if not out.findings:
        print(f"no confirmed violation in {len(out.trials)} trials ({out.search_seconds:.0f}s; {nothing}; "
              f"{canaries}); report: {report}")
        return OK
    print(f"{len(out.findings)} distinct finding(s) on {s.scheduler} in {len(out.trials)} trials ({nothing}; "
          f"{canaries}):")
    for i, f in enumerate(out.findings, 1):
        m = f.minimal
        print(f"  {i}. {', '.join(f.target)} by {'; '.join(f.signature[1:])} (trials "
              f"{', '.join(str(h.trial) for h in f.hits)}); minimal {len(m.rules)} rules, {m.pods} pods, "
              f"{m.nodes or s.nodes} nodes, {m.shape}; reproduced {f.rate()}; {s.out}/findings/{f.slug(i)}")
    print(f"{out.trials_per_hour():.0f} trials/hour, median {out.median_trial():.1f}s")
    print(f"report: {report}\nreproduce: kube-fault-proxy search replay {s.out}/findings/<dir> (the first: {s.out})")
    return FAILED


def _replay(args: argparse.Namespace) -> int:
    try:
        doc, genome = replaying.load_case(args.directory)
    except replaying.CaseError as e:
        raise UsageError(str(e)) from None
    if (args.pods is not None and args.pods < 1) or (args.nodes is not None and args.nodes < 1):
        raise UsageError("--pods and --nodes must be at least 1")
    nodes = int(doc["nodes"])
    if args.nodes is not None:  # at another size: every node of the fresh control plane schedulable
        genome, nodes = genome.with_(nodes=None), args.nodes
    if args.pods is not None:
        genome = genome.with_(pods=args.pods)
    target = set(doc["target"])
    state = args.state_dir or default_state_dir().parent / "search-replay"
    stderr_console().print(f"replaying {len(genome.rules)} rules, {genome.pods} pods on "
                           f"{genome.nodes or nodes} of {nodes} nodes, {args.times} times", markup=False)
    note = stderr_console().print
    with replaying.case_rig(doc, genome, state, args.profiles, nodes) as rig:
        runs = [run_trial(rig, genome, f"replay-{k + 1}", confirm_tier(doc["scheduler"]),
                          lambda m: note(m, markup=False))
                for k in range(args.times)]
        built = rig.build  # the build replayed (a search.json's `build` names the one it searched)
    hits = sum(1 for r in runs if target <= set(r.broken))
    excused = sum(1 for r in runs if target <= set(r.broken) and r.own_effect)
    print(f"{hits}/{len(runs)} replays broke {', '.join(sorted(target))} on {built}"
          + (f" ({excused} of them wholly excused by the ledger: the fault's own effect)" if excused else ""))
    for r in runs:
        if r.check.get("ledger"):
            print(f"  {r.name}: {r.check['ledger']}")
    return FAILED if hits else OK


def run(args: argparse.Namespace) -> int:
    """Dispatch `search` and its actions: replay, rejudge, orders."""
    try:
        if args.search_command == "replay":
            return _replay(args)
        if args.search_command == "rejudge":
            return search_rejudge.run(args)
        if args.search_command == "orders":
            return search_orders.run(args)
        return _search(args)
    except (UsageError, ResumeError, ProfileError) as e:
        what = f"{args.output}/trials.jsonl cannot be resumed: {e} (--fresh starts over)" if isinstance(
            e, ResumeError) else str(e)
        print(f"kube-fault-proxy search: {what}", file=sys.stderr)
        return USAGE
    except (ClusterError, build.BuildError, CampaignError) as e:
        print(f"kube-fault-proxy: {e}", file=sys.stderr)
        return USAGE if isinstance(e, build.BuildInputError) else FAILED


def add_arguments(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The `search` subcommand."""
    p = sub.add_parser("search", help="search fault profiles for one that breaks an invariant; shrink it")
    p.add_argument("--target", "--scheduler", dest="scheduler", metavar="TARGET",
                   help=f"what is under test: {', '.join(waist.TARGETS)}; kube-controller-manager may name the "
                        f"workload kinds its trials make (kube-controller-manager:replicaset,job; default all of "
                        f"{','.join(WORKLOAD_KINDS)}; named only: {','.join(NAMED_ONLY_KINDS)}, a StatefulSet "
                        f"that updates by Recreate, which needs the gate StatefulSetRecreateStrategy). --scheduler is "
                        f"the same option")
    p.add_argument("--feature-gates", type=feature_gate, action="append", default=[], metavar="COMPONENT:GATE=BOOL",
                   help="the target's feature gates (repeatable; components kube-scheduler, with --scheduler "
                        "kube-scheduler, and kube-apiserver), e.g. kube-scheduler:SchedulerAsyncAPICalls=true; "
                        "the target is the build plus its gates")
    add_kubernetes_argument(p)
    p.add_argument("--control", metavar="CONTROL",
                   help="the control a hit must leave clean: the other scheduler (yunikorn, kube-scheduler) under "
                        f"the same profile; {UNFAULTED} (the same scheduler and workload without it); "
                        f"{controls.GATES}GATE=BOOL,... (the same build with these gates, the target's others kept, "
                        "under the same profile: a differential control, e.g. gates:SchedulerAsyncAPICalls=false); "
                        f"{controls.RELEASED} (with --yunikorn-patch, --yunikorn-source or --kube-scheduler-patch: "
                        "the scheduler as released under the same profile, so only what the patch changed is "
                        f"confirmed); {controls.PATCH}FILE (the same, with FILE, a patch or a shipped YuniKorn "
                        "patch's name, applied to the release: the control of a target built on FILE, e.g. a bug "
                        "planted on a fixed build); "
                        "or none. Default: with --feature-gates, each of them the other way; else kube-scheduler "
                        f"for a YuniKorn search, {UNFAULTED} for a kube-scheduler one")
    p.add_argument("--shapes", metavar="S,...",
                   help=f"workload shapes the trials draw from (default: {', '.join(SHAPES)}; also "
                        f"{', '.join(DEVICE_SHAPES)}, whose pods claim devices of a fake DRA driver; with "
                        "dra-binding the devices wait for binding conditions, which the rig sets as the driver "
                        "would; and gang, whose pods are gangs of PodGroups with minCount, kube-scheduler only, "
                        "with GenericWorkload on)")
    p.add_argument("--actions", metavar="A,...",
                   help=f"trial actions (node and pod churn during the faulted load) the trials draw from: some of "
                        f"{', '.join(ACTIONS)}; all; or none (the default: a seed draws what it drew before; the only "
                        f"choice for {waist.CONTROLLER_MANAGER})")
    p.add_argument("--canary-every", type=int, default=10, metavar="N",
                   help="every N-th trial is a fault-free canary (default 10; 0: none)")
    p.add_argument("--controls", type=int, default=3, metavar="N",
                   help="control runs per hit and per minimal case (default 3): a hit is confirmed only when none "
                        "of them breaks its invariants; they stop at the first that does")
    p.add_argument("--differential", type=int, default=0, metavar="K",
                   help="the differential oracle: run each trial's workload K times with no fault (K >= 3, the first "
                        "time it is drawn), mask what differs between those runs, and report a trial that breaks "
                        "no invariant but ends elsewhere as `diverged` (default 0: off)")
    p.add_argument("--plan", action="store_true",
                   help="a planned search instead of the random one (Sieve's test plans): record one fault-free "
                        "reference run, list the target's causal points (each write it made, each event it consumed "
                        "just before a write), and run, within the budget, the perturbations that land at each "
                        "(a crash point right after a write, the write committed after its error, a stale view at "
                        "it, the event dropped, delayed or held), round-robin over groups of equivalent points "
                        "(same resource, verb and phase); the report gives points covered of points in the plan "
                        "and the distinct end states reached. Kinds default to all")
    p.add_argument("--plan-from", type=Path, metavar="DIR",
                   help="with --plan (implied): take the reference run from DIR/reference.json (what an earlier "
                        "`search --plan -o DIR` recorded) instead of recording one")
    p.add_argument("--plan-per-group", type=int, default=2, metavar="N",
                   help="causal points kept per group of equivalent points, spread over the group (default 2)")
    p.add_argument("--budget", metavar="DURATION", help="search time, e.g. 10m (shrinking has its own budget)")
    p.add_argument("--seed", type=int, default=1, help="search seed: trial i is drawn from (seed, i)")
    more = ", ".join(k for k in KNOWN_KINDS if k not in ALL_KINDS)
    p.add_argument("--kinds", metavar="K,...",
                   help=f"fault kinds to search (default: {', '.join(ALL_KINDS)}; also known: {more}; "
                        "all: every kind, these included)")
    p.add_argument("--exclude-kinds", metavar="K", action="append", help="leave this kind out (repeatable)")
    p.add_argument("-o", "--output", type=Path, metavar="DIR", help="where the report and minimal profile go")
    p.add_argument("--nodes", type=int, help="fake nodes of the search rig (default 20; kube-controller-manager 4)")
    p.add_argument("--pods", type=int, help="pods per search trial (default 100; kube-controller-manager about 40)")
    p.add_argument("--shrink-budget", default="10m", metavar="DURATION",
                   help="time for shrinking each distinct finding (default 10m)")
    p.add_argument("--shrink-total", default="30m", metavar="DURATION",
                   help="no finding's shrink starts after this much of the shrink phase (default 30m; `none`: "
                        "shrink every finding); the first of each set of broken invariants goes first, and a "
                        "finding whose drawn profile contains an earlier minimal case is filed under it unshrunk")
    p.add_argument("--replays", type=int, default=5, help="replays of the minimal case (default 5)")
    p.add_argument("--max-trials", type=int, help="stop after this many search trials")
    p.add_argument("--include-known", nargs="?", const="all", metavar="ID,...",
                   help="confirm, shrink and replay hits of known bugs (the shipped catalogue and --known) and hits "
                        "that are the faults' own effect like any other, as before the catalogue (with IDs: only "
                        "those known findings, e.g. YUNIKORN-3128); by default each known bug is confirmed once and "
                        "then only counted, and a fault's own effect is never confirmed")
    p.add_argument("--known", type=Path, action="append", metavar="FILE",
                   help="a known-findings catalogue of your own, added to the shipped one (repeatable; the same "
                        "format as the package's known-findings.yaml)")
    p.add_argument("--fresh", action="store_true",
                   help="start from trial 0 even when -o DIR holds this search's trials.jsonl (by default a search "
                        "with the same -o, scheduler and seed continues where it stopped)")
    p.add_argument("--profiles", type=Path, metavar="DIR",
                   help="profile library (default: ./fault_profiles if it exists, else the shipped one)")
    p.add_argument("--state-dir", type=Path, help="where the search's control planes live")
    search_builds.add_arguments(p)
    search_campaign.add_campaign_arguments(p)
    ssub = p.add_subparsers(dest="search_command", metavar="ACTION")
    r = ssub.add_parser("replay", help="rerun a search directory's minimal case on a fresh control plane")
    r.add_argument("directory", type=Path, help="a search's output directory, or one finding's")
    r.add_argument("--times", type=int, default=5, help="replays (default 5)")
    r.add_argument("--pods", type=int, help="replay at this load instead of the minimal case's (e.g. full size)")
    r.add_argument("--nodes", type=int, help="on a control plane of this many nodes, all schedulable")
    r.add_argument("--profiles", type=Path, metavar="DIR", help="profile library (default: ./fault_profiles if it "
                   "exists, else the shipped one)")
    r.add_argument("--state-dir", type=Path, help="where the replay's control plane lives")
    search_rejudge.add_arguments(ssub)
    search_orders.add_arguments(ssub)
