"""Mutation benchmark of the search: planted bugs (bench/mutants/), how many trials each search mode needs to find
each one, and what else it reports.

A mutant is a small patch to a build under test, YuniKorn v1.9.0 or kube-scheduler of the default Kubernetes
release (bench/mutants/mutants.yaml names each, its target, its patch and the invariants it shows as). Per mutant,
mode (random: `search`; plan: `search --plan`) and seed, the driver runs `kube-fault-proxy search` on the patched
build (`--yunikorn-patch`, `--kube-scheduler-patch`) with the released build as the control (`--control
build:released`): a hit is confirmed only when its replay breaks the same and the released build, under the same
profile, does not. The mutant counts as found at the first hit so confirmed that breaks one of its invariants
(also when the search then files it under a known bug's signature: `known` says which); the driver then interrupts
the search (SIGINT: it stops every process it started) and records:

  trials_to_find  search steps up to and including the finding one (random mode counts its canaries: they cost a
                 step); null when the budget or the trial cap ran out first
  other_findings  confirmed hits that break none of the mutant's invariants, as distinct sets of invariants
  known          the known bugs the search filed hits under
  verdicts       every hit's verdict (confirmed, control-broken, not-reproduced, ...)

With `--base-patch FILE` (e.g. 3355-forget-pod-reverts-with-expiry, the fix of YUNIKORN-3355, which masks the
planted bugs in the release), each mutant is planted on that base: the target is v1.9.0 with FILE and then the
mutant's patch, as one patch (patches.combine, written under -o DIR/patches), and the control is v1.9.0 with
FILE alone (`--control build:patch=FILE`).

`faultfree` runs each mutant with no fault (no action, touchPods, deletePods) on the same trial machinery and
records what broke: a mutant a fault-free run trips is no planted bug. `table` prints the median over seeds.
Results: bench/results/mutation-*.json. Never in CI: every run starts local control planes.
"""

from __future__ import annotations

import argparse
import calendar
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from kube_fault_proxy.proxy.profiles.loader import load_model
from kube_fault_proxy.proxy.profiles.problems import Problem, ProfileError
from kube_fault_proxy.proxy.schema.strict import StrictModel
from kube_fault_proxy.rig.cluster import patches
from kube_fault_proxy.rig.invariants.catalogue import lookup
from pydantic import Field, field_validator

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "bench" / "mutants" / "mutants.yaml"
MODES = ("random", "plan")
PATCH_OPTIONS = {"yunikorn": "--yunikorn-patch", "kube-scheduler": "--kube-scheduler-patch"}  # target -> search's
POLL_SECONDS = 5.0


class Mutant(StrictModel):
    """One planted bug: the build it patches, its patch (relative to the manifest) and the invariants it breaks."""

    name: str
    target: Literal["yunikorn", "kube-scheduler"]  # the build the patch is to (PATCH_OPTIONS)
    patch: str  # relative to the manifest; absolute once loaded
    # a base patch's name -> the mutant's patch rebased for it (relative, then absolute, as `patch`): for a base that
    # changes the lines `patch` changes, so `patch` does not apply over it
    bases: dict[str, str] = Field(default_factory=dict)
    breaks: list[str]

    @field_validator("breaks")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("name at least one invariant the planted bug breaks")
        return [lookup(x).name for x in v]


class Manifest(StrictModel):
    """The file: `mutants: [...]`."""

    mutants: list[Mutant]


def load(path: Path = MANIFEST) -> list[Mutant]:
    """The manifest's mutants, their patch paths made absolute; ProfileError names file:line:col and the field."""
    source = str(path)
    manifest = load_model(path, Manifest, "a mutant manifest is a mapping with `mutants:`")
    out, seen = [], set()
    for i, m in enumerate(manifest.mutants):
        if m.name in seen:
            raise ProfileError([Problem(source, None, None, f"mutants[{i}].name", f"{m.name!r} is given twice")])
        seen.add(m.name)
        patch = path.parent / m.patch
        if not patch.is_file():
            raise ProfileError([Problem(source, None, None, f"mutants[{i}].patch", f"{patch} does not exist")])
        bases = {}
        for base, rebased in m.bases.items():
            if not (path.parent / rebased).is_file():
                raise ProfileError([Problem(source, None, None, f"mutants[{i}].bases.{base}",
                                            f"{path.parent / rebased} does not exist")])
            bases[base] = str((path.parent / rebased).resolve())
        out.append(m.model_copy(update={"patch": str(patch.resolve()), "bases": bases}))
    return out


def chosen(mutants: Sequence[Mutant], names: str | None) -> list[Mutant]:
    """The mutants named (comma-separated, run in that order; None: all, in the manifest's); ValueError names the
    unknown ones."""
    if names is None:
        return list(mutants)
    asked = [n.strip() for n in names.split(",") if n.strip()]
    unknown = sorted(set(asked) - {m.name for m in mutants})
    if unknown:
        raise ValueError(f"no mutant {', '.join(unknown)} (known: {', '.join(m.name for m in mutants)})")
    by_name = {m.name: m for m in mutants}
    return [by_name[n] for n in dict.fromkeys(asked)]


@dataclass
class Run:
    """One search of one mutant in one mode under one seed, as recorded."""

    mutant: str
    mode: str
    seed: int
    out: str
    base: str | None = None  # the base patch's name the mutant was planted on (None: the release)
    trials_to_find: int | None = None  # search steps up to and including the finding one
    found_by: list[str] | None = None  # the invariants the finding hit broke (and its replay)
    found_as: str | None = None  # the known bug the search filed the finding hit under, if any
    seconds_to_find: float | None = None
    steps: int = 0  # search steps run (trials, canaries) when the search stopped
    trial_runs: int = 0  # every trial run: search steps, replays, controls, the plan's reference
    other_findings: list[list[str]] = field(default_factory=list)
    known: list[str] = field(default_factory=list)
    verdicts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    exit: int | None = None
    interrupted: bool = False  # stopped by the driver once the mutant was found
    error: str | None = None


def confirmed(hits: Iterable[Mapping[str, Any]], known: bool = False) -> list[Mapping[str, Any]]:
    """The hits a search confirmed: replayed, and the control clean of their invariants; with `known`, also those it
    then filed under a known bug (replayed and controlled as well; a known bug's later hits, not replayed, are not)."""
    return [h for h in hits if h.get("verdict") == "confirmed" or (known and h.get("verdict") == "known"
                                                                   and h.get("replay") is not None)]


def canonical(name: str) -> str:
    """An invariant's name as the manifest gives it: trials report YuniKorn's by their keys (I1 for
    queue-books-bound-pods); a name the catalogue does not know (`diverged`) stays as it is."""
    try:
        return lookup(name).name
    except ValueError:
        return name


def target(hit: Mapping[str, Any]) -> list[str]:
    """What a hit's first run and its replay both broke, but for what its control broke too (`shared`: the faults'
    effect, not the hit's), by canonical name: hit.Hit.target."""
    both = {canonical(x) for x in hit.get("broken") or []} & {canonical(x) for x in hit.get("replay") or []}
    return sorted(both - {canonical(x) for x in hit.get("shared") or []})


def first_find(doc: Mapping[str, Any], breaks: Sequence[str]) -> Mapping[str, Any] | None:
    """The first confirmed hit (by trial) that breaks one of the mutant's invariants, if any."""
    found = [h for h in confirmed(doc.get("hits") or [], known=True) if set(target(h)) & set(breaks)]
    return min(found, key=lambda h: int(h["trial"])) if found else None


def other_findings(doc: Mapping[str, Any], breaks: Sequence[str]) -> list[list[str]]:
    """The distinct sets of invariants of confirmed hits that break none of the mutant's: findings that are not
    the planted bug (the released build is clean of them under the same profile)."""
    sets = {tuple(target(h)) for h in confirmed(doc.get("hits") or []) if not set(target(h)) & set(breaks)}
    return [list(s) for s in sorted(sets)]


def verdicts(doc: Mapping[str, Any]) -> dict[str, int]:
    """How many hits got each verdict."""
    return dict(sorted(Counter(str(h.get("verdict")) for h in doc.get("hits") or []).items()))


def record(run: Run, doc: Mapping[str, Any], breaks: Sequence[str], trial_runs: int) -> Run:
    """Fill a run's figures from its search.json (doc) and the number of lines of its trials.jsonl."""
    hit = first_find(doc, breaks)
    if hit is not None:
        run.trials_to_find = int(hit["trial"]) + 1
        run.found_by = target(hit)
        run.found_as = hit.get("known")
    run.steps = int(doc.get("trials") or 0) + len(doc.get("canaries") or [])
    run.trial_runs = trial_runs
    run.other_findings = other_findings(doc, breaks)
    run.verdicts = verdicts(doc)
    run.known = sorted({str(h["known"]) for h in doc.get("hits") or [] if h.get("verdict") == "known"})
    return run


def base_patch(given: str) -> str:
    """`--base-patch`: a patch file or a shipped patch's name, checked to be a unified diff; its absolute path.
    ValueError names the file and what is wrong."""
    from kube_fault_proxy import shipped

    path = shipped.yunikorn_patch(Path(given))
    patches.check_file(path, f"--base-patch {given}")
    return str(path.resolve())


def planted(mutant: Mutant, base: str | None, directory: Path) -> str:
    """The patch the target is built from: the mutant's own, or with a base the two in one (`<base>+<mutant>.patch`
    in directory; the same bytes every time, so the same build). On a base the manifest has a rebased patch for
    (`bases`, by the base's name), that one."""
    if base is None:
        return mutant.patch
    own = mutant.bases.get(base_name(base) or "", mutant.patch)
    return str(patches.combine([Path(base), Path(own)], directory, f"{base_name(base)}+{mutant.name}"))


def search_argv(mutant: Mutant, mode: str, seed: int, out: Path, state: Path, opts: argparse.Namespace,
                patch: str | None = None) -> list[str]:
    """The `kube-fault-proxy search` command of one run: the target built from `patch` (default: the mutant's
    own), the control the release, or with --base-patch the release with the base patch."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
    control = "build:released" if opts.base_patch is None else f"build:patch={opts.base_patch}"
    argv = [str(Path(sys.executable).with_name("kube-fault-proxy")), "search", "--scheduler", mutant.target,
            PATCH_OPTIONS[mutant.target], patch or mutant.patch, "--control", control, "--controls", str(opts.controls),
            "--kinds", opts.kinds, "--seed", str(seed), "--budget", opts.budget,
            "--nodes", str(opts.nodes), "--pods", str(opts.pods), "--shrink-total", "0s",
            "--fresh", "-o", str(out), "--state-dir", str(state)]
    if opts.max_trials is not None:
        argv += ["--max-trials", str(opts.max_trials)]
    if getattr(opts, "shapes", None):  # the workload shapes the trials draw from (default: the search's)
        argv += ["--shapes", opts.shapes]
    if getattr(opts, "actions", None):  # the trial actions (node and pod churn) both modes may perform
        argv += ["--actions", opts.actions]
    if opts.include_known:
        argv.append("--include-known")
    return [*argv, "--plan"] if mode == "plan" else argv


def _read(path: Path) -> dict[str, Any] | None:
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
        return doc
    except (OSError, ValueError):  # not written yet, or caught half written
        return None


def _lines(path: Path) -> int:
    try:
        return sum(1 for _ in path.open())
    except OSError:
        return 0


def base_name(base: str | None) -> str | None:
    """How a record names the base: its file's name without .patch."""
    return None if base is None else Path(base).name.removesuffix(".patch").removesuffix(".diff")


def run_one(mutant: Mutant, mode: str, seed: int, opts: argparse.Namespace) -> Run:
    """Search one mutant in one mode under one seed; stop the search once the mutant is found."""
    out = opts.output / mutant.name / mode / f"seed-{seed}"
    out.mkdir(parents=True, exist_ok=True)
    run = Run(mutant.name, mode, seed, str(out), base_name(opts.base_patch))
    patch = planted(mutant, opts.base_patch, opts.output / "patches")
    argv = search_argv(mutant, mode, seed, out, Path(f"{opts.state_dir}-{mutant.name}-{mode}-{seed}"), opts, patch)
    print(f"==> {mutant.name} {mode} seed {seed}: {' '.join(argv)}", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    with (out / "search.log").open("w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        while proc.poll() is None:
            time.sleep(POLL_SECONDS)
            if opts.until is not None and time.time() >= opts.until and not run.interrupted:
                run.interrupted = True
                run.error = "stopped at --until"
                proc.send_signal(signal.SIGINT)
            doc = _read(out / "search.json")
            if run.seconds_to_find is None and doc is not None and first_find(doc, mutant.breaks) is not None \
                    and not run.interrupted:
                run.seconds_to_find = round(time.monotonic() - t0, 1)
                run.interrupted = True
                proc.send_signal(signal.SIGINT)  # the search stops every process it started, and writes its report
        run.exit = proc.returncode
    run.seconds = round(time.monotonic() - t0, 1)
    doc = _read(out / "search.json")
    if doc is None:
        run.error = f"no search.json in {out} (exit {run.exit}; see search.log)"
        return run
    return record(run, doc, mutant.breaks, _lines(out / "trials.jsonl"))


def rescore(run: Mapping[str, Any], breaks: Sequence[str]) -> dict[str, Any]:
    """A recorded run with its figures recomputed from its search directory (what `record` reads)."""
    out = Path(run["out"])
    doc = _read(out / "search.json")
    if doc is None:
        return dict(run)
    fresh = record(Run(run["mutant"], run["mode"], run["seed"], run["out"], run.get("base")), doc, breaks,
                   _lines(out / "trials.jsonl"))
    figures = {k: v for k, v in asdict(fresh).items()
               if k not in ("seconds_to_find", "seconds", "exit", "interrupted", "error")}
    return {**run, **figures}


def median(values: Sequence[int | None]) -> float | None:
    """The median trials-to-find over seeds, a seed that did not find the mutant counting as worse than every seed
    that did; None when that median is a seed that did not find it (none found it, or too few did)."""
    if not values:
        return None
    m = statistics.median(math.inf if v is None else v for v in values)
    return None if math.isinf(m) else float(m)


def _row(run: Mapping[str, Any]) -> tuple[str, str | None, str]:
    """What a table's row is per: the mutant, the base it was planted on, the mode (with the trial actions the
    search could perform, when it could: `plan, actions all`)."""
    actions = (run.get("settings") or {}).get("actions")
    return run["mutant"], run.get("base"), f"{run['mode']}, actions {actions}" if actions else run["mode"]


def table(runs: Sequence[Mapping[str, Any]]) -> str:
    """The markdown table: per mutant (and base) and mode, seeds run, found in how many, the median trials to find, the
    trials of each seed, and the other findings."""
    rows = ["| mutant | mode | seeds | found | median trials to find | trials to find per seed | other findings |",
            "|---|---|---|---|---|---|---|"]
    for mutant, base, mode in dict.fromkeys(_row(r) for r in runs):
        mine = [r for r in runs if _row(r) == (mutant, base, mode) and not r.get("error")]
        if not mine:
            continue
        found = [r["trials_to_find"] for r in mine]
        m = median(found)
        per_seed = ", ".join(f"s{r['seed']}: {r['trials_to_find'] or f'not in {r['steps']}'}" for r in mine)
        others = sorted({"+".join(o) for r in mine for o in r["other_findings"]})
        rows.append(f"| {mutant}{f' on {base}' if base else ''} | {mode} | {len(mine)} | "
                    f"{sum(v is not None for v in found)} | "
                    f"{'-' if m is None else f'{m:g}'} | {per_seed} | "
                    f"{len(others)}{': ' + ', '.join(others) if others else ''} |")
    return "\n".join(rows)


def fault_free(mutant: Mutant, opts: argparse.Namespace) -> list[dict[str, Any]]:
    """Fault-free trials of a mutant (no rules; no action, touchPods, deletePods) on the search's trial machinery."""
    from kube_fault_proxy import shipped
    from kube_fault_proxy.rig.search.genome import Genome
    from kube_fault_proxy.rig.search.trial import CANARY, Rig, run_trial

    state = Path(f"{opts.state_dir}-faultfree-{mutant.name}")
    patch = planted(mutant, opts.base_patch, Path(f"{opts.state_dir}-patches"))
    out: list[dict[str, Any]] = []
    with Rig.running(state, mutant.target, opts.nodes, shipped.profiles_dir(None), Path(patch),
                     kube_scheduler_patch=Path(patch)) as rig:  # each rig takes its own scheduler's patch
        for seed in opts.seeds:
            for action in (None, "touchPods", "deletePods"):
                g = Genome(rules=(), pods=opts.pods, action=action, seed=seed, origin="fault-free")
                name = f"ff-{(action or 'none').lower()}-{seed}"  # a namespace's name: lower case
                r = run_trial(rig, g, name, CANARY, lambda m: print(m, file=sys.stderr))
                out.append({"mutant": mutant.name, "base": base_name(opts.base_patch), "build": rig.build,
                            "action": action, "seed": seed,
                            "broken": r.broken, "error": r.error, "seconds": round(r.seconds, 1)})
                print(f"  {mutant.name} {action or 'no action'} seed {seed}: "
                      f"{r.error or ', '.join(r.broken) or 'clean'}", file=sys.stderr, flush=True)
    return out


def _save(path: Path, doc: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".partial")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    tmp.replace(path)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("run", "faultfree"):
        c = sub.add_parser(name)
        c.add_argument("--mutants", help="comma-separated names (default: every one in the manifest)")
        c.add_argument("--manifest", type=Path, default=MANIFEST)
        c.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 3])
        c.add_argument("--nodes", type=int, default=10)
        c.add_argument("--pods", type=int, default=40)
        c.add_argument("--state-dir", default="/tmp/mutation-state", help="prefix of each run's state directory")
        c.add_argument("--results", type=Path, required=True, help="the JSON file the records go to")
        c.add_argument("--base-patch", metavar="FILE",
                       help="plant each (YuniKorn) mutant on v1.9.0 with this patch (a file or a shipped patch's "
                            "name, e.g. 3355-forget-pod-reverts-with-expiry) and control with that build "
                            "(build:patch=FILE); default: on the release, controlled by build:released")
    r = sub.choices["run"]
    r.add_argument("--modes", default=",".join(MODES))
    r.add_argument("--budget", default="10m", help="each search's budget")
    r.add_argument("--max-trials", type=int, help="each search's trial cap")
    r.add_argument("--controls", type=int, default=3, help="control runs of the released build per hit")
    r.add_argument("--kinds", default="all", help="fault kinds (default all, the same for both modes)")
    r.add_argument("--shapes", help="workload shapes the searches draw from (default: the search's own)")
    r.add_argument("--actions", help="trial actions both modes may perform (the search's --actions: random draws "
                                     "them, a plan deletes a pod while its write is held); default none")
    r.add_argument("--include-known", action="store_true",
                   help="confirm every hit like a new one (the search's --include-known: no known-bug shortcut, "
                        "no ledger excuse)")
    r.add_argument("--until", type=lambda s: calendar.timegm(time.strptime(s, "%Y-%m-%dT%H:%M")),
                   help="UTC YYYY-MM-DDTHH:MM: interrupt the search under way then, start none after")
    r.add_argument("-o", "--output", type=Path, required=True, help="where the searches' directories go")
    t = sub.add_parser("table")
    t.add_argument("results", type=Path)
    rs = sub.add_parser("rescore", help="recompute each run's figures from its search directory (same manifest)")
    rs.add_argument("results", type=Path)
    rs.add_argument("--manifest", type=Path, default=MANIFEST)
    args = p.parse_args(argv)
    if args.command == "table":
        print(table(json.loads(args.results.read_text())["runs"]))
        return 0
    if args.command == "rescore":
        kept = json.loads(args.results.read_text())
        breaks = {m.name: m.breaks for m in load(args.manifest)}
        kept["runs"] = [rescore(r, breaks[r["mutant"]]) for r in kept["runs"]]
        _save(args.results, kept)
        print(table(kept["runs"]))
        return 0
    try:
        mutants = chosen(load(args.manifest), args.mutants)
        args.base_patch = None if args.base_patch is None else base_patch(args.base_patch)
        others = [m.name for m in mutants if m.target != "yunikorn"]
        if args.base_patch is not None and others:
            raise ValueError(f"--base-patch is a YuniKorn base; {', '.join(others)} patch kube-scheduler")
        for m in mutants if args.base_patch is not None else []:  # both parse: a bad one is said before any run
            own = m.bases.get(base_name(args.base_patch) or "", m.patch)
            patches.parse(Path(own).read_text(), own)
    except (ProfileError, ValueError) as e:
        print(f"mutation: {e}", file=sys.stderr)
        return 2
    if args.command == "faultfree":
        checks = [c for m in mutants for c in fault_free(m, args)]
        _save(args.results, {"kind": "faultfree", "nodes": args.nodes, "pods": args.pods, "checks": checks})
        return 1 if any(c["broken"] or c["error"] for c in checks) else 0
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if set(modes) - set(MODES):
        print(f"mutation: --modes takes {', '.join(MODES)}", file=sys.stderr)
        return 2
    settings = {k: v for k, v in vars(args).items() if k not in ("command", "manifest", "results", "output")}
    doc: dict[str, Any] = {"kind": "mutation", "settings": {**settings, "seeds": args.seeds}, "runs": []}
    old = _read(args.results)
    if old is not None and old.get("kind") == "mutation":
        doc["runs"] = old["runs"]  # a second invocation adds its runs to the file
    for seed in args.seeds:  # every mutant and mode once before the next seed: a cut-short run covers more
        for m in mutants:
            for mode in modes:
                if args.until is not None and time.time() >= args.until:
                    break
                run = run_one(m, mode, seed, args)
                doc["runs"].append({**asdict(run), "settings": settings, "at": time.strftime("%FT%TZ", time.gmtime())})
                _save(args.results, doc)
                print(f"    {m.name} {mode} seed {seed}: "
                      f"{f'found at step {run.trials_to_find}' if run.trials_to_find else 'not found'} "
                      f"({run.seconds:.0f}s, {run.steps} steps, other findings {len(run.other_findings)})",
                      file=sys.stderr, flush=True)
    print(table(doc["runs"]))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
