"""`scenario run`, `report` and `demo`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kube_fault_proxy import shipped
from kube_fault_proxy.cli.exits import FAILED, OK, USAGE
from kube_fault_proxy.cli.targets import add_target_arguments
from kube_fault_proxy.kube.kubeapi import ConfigError, Kube
from kube_fault_proxy.proxy.profiles.loader import ProfileError
from kube_fault_proxy.rig.cluster import build, feature_gates, patches, versions
from kube_fault_proxy.rig.cluster.control_plane import needed_components
from kube_fault_proxy.rig.cluster.record import ClusterError, default_state_dir
from kube_fault_proxy.rig.console import show_table
from kube_fault_proxy.rig.invariants import check
from kube_fault_proxy.rig.runs import compare
from kube_fault_proxy.rig.runs.report import SUMMARY_HEADERS, summary_rows, write_run, write_summary
from kube_fault_proxy.rig.runs.run_record import Target, local_plane
from kube_fault_proxy.rig.runs.runner import SCHEDULER_NAMES, check_fresh, run_local, run_on, stop_steps
from kube_fault_proxy.rig.runs.scenario import load_scenario

# The fix the demo's third column runs: of patches/yunikorn/3355-*.patch, the build whose founding-scenario
# runs are clean (docs/records/yunikorn-3355-fixes.md has the verdict for each).
DEMO_FIX = shipped.PATCHES / "yunikorn" / "3355-forget-pod-reverts-with-expiry.patch"


class UsageError(Exception):
    """Flags that do not fit together."""


@dataclass(frozen=True)
class Contender:
    """One scheduler to run the scenario with; optionally a patched build (YuniKorn: or a source tree)."""

    scheduler: str
    patch: Path | None = None
    source: Path | None = None

    def component(self, kubernetes: str = versions.KUBERNETES) -> build.Component | None:
        """The scheduler's binary (kube-scheduler of the Kubernetes release `kubernetes`)."""
        if self.scheduler == "yunikorn":
            return build.yunikorn(self.patch, self.source)
        if self.scheduler == "kube-scheduler":
            return (build.kube_scheduler(self.patch, kubernetes) if self.patch is not None
                    else build.kubernetes("kube-scheduler", kubernetes))
        return None


def contenders_for(schedulers: list[str], builds: list[Contender], with_release: bool) -> list[Contender]:
    """The runs in order: each scheduler once, or as each build given for it (after the release, if asked)."""
    out: list[Contender] = []
    for s in schedulers:
        own = [b for b in builds if b.scheduler == s]
        out += ([Contender(s)] if with_release else []) + own if own else [Contender(s)]
    return out


def run_scenarios(path: Path, schedulers: list[str] | None, seed: int, repeat: int, out: Path | None,
                  profiles: Path, state_dir: Path, existing: Target | None = None,
                  builds: list[Contender] | None = None, with_release: bool = False,
                  gates: feature_gates.Gates | None = None,
                  kubernetes: str = versions.KUBERNETES) -> tuple[int, str, Path]:
    """Every requested run; (exit code, summary table, report directory).

    With `existing`, the runs use that cluster (its scheduler already behind the proxy) instead
    of a fresh local control plane each. A scheduler with builds in `builds` (patched, or for YuniKorn a
    source tree) runs once per build, after the release if `with_release`; without builds, the release. `gates`
    (component -> gate -> on) go to each local control plane's components, of the Kubernetes release `kubernetes`."""
    scenario = load_scenario(path)
    chosen = schedulers or scenario.spec.schedulers() or [scenario.spec.cluster.scheduler]
    for scheduler in chosen:  # a stop's bound under the scheduler's promise is refused before anything starts
        stop_steps(scenario, scheduler)
    check_fresh(scenario, existing)  # so is a fresh scheduler on a cluster whose scheduler the rig cannot restart
    contenders = contenders_for(chosen, builds or [], with_release)
    out = out or Path("reports") / f"{scenario.metadata.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if existing is None:
        release = build.components(kubernetes)
        base = [release[n] for n in needed_components("none")]  # etcd, apiserver, controller-manager, KWOK, kubectl
        for c in [c.component(kubernetes) for c in contenders] + base:
            if c is not None:  # one at a time, before any run: a patch that does not apply stops everything
                build.build(c)
    runs = []
    for contender in contenders:
        scheduler, variant = contender.scheduler, getattr(contender.component(), "variant", None)
        name = f"{scheduler}+{variant}" if variant else scheduler
        for k in range(repeat):
            s = seed + k
            print(f"==> {scenario.metadata.name}: {name}, seed {s} ({k + 1}/{repeat})",
                  file=sys.stderr, flush=True)
            if existing is None:
                result = run_local(scenario, scheduler, s, state_dir / f"{name}-{s}", profiles,
                                   patch=contender.patch, yunikorn_source=contender.source,
                                   feature_gates=_gates_for(gates or {}, scheduler), kubernetes=kubernetes)
            else:  # a local plane's scheduler names its build (and a patched YuniKorn's expectation)
                plane = existing.cluster
                result = run_on(existing, scenario, scheduler, s, build=plane.scheduler_build if plane else None,
                                variant=plane.scheduler_variant if plane else None)
            d = out / f"{name}-seed-{s}"
            doc = {**result.as_dict(), "dir": d.name}
            write_run(d, doc, result.table)
            if result.report is not None:
                show_table(check.TABLE_HEADERS, check.table_rows(result.report), result.table, file=sys.stderr,
                           caption=check.verdict_line(result.report))
            runs.append(doc)
    table = write_summary(out, runs)
    code = OK if all(r["met"] is not False for r in runs) else FAILED
    return code, table, out


def _existing(args: argparse.Namespace, schedulers: list[str] | None) -> tuple[Target, list[str]]:
    """The cluster --kubeconfig reaches, and the one scheduler to run. A kubeconfig of a local control plane
    `cluster up` brought up (and left running) brings the plane with it: its proxy's control plane, YuniKorn's
    REST API and its scheduler are the defaults, and, when its scheduler is the one under test, the run may
    restart it (freshScheduler, killScheduler, stopScheduler, holdBack beforeScheduler)."""
    plane = local_plane(args.kubeconfig)
    if plane is not None and plane.proxy is None:
        plane = None  # no proxy in front of it: nothing to run a scenario through
    if plane is not None and not schedulers and plane.scheduler in SCHEDULER_NAMES:
        schedulers = [plane.scheduler]
    control = args.control_url or (plane.control_url if plane is not None else None)
    if not control or not schedulers or len(schedulers) != 1:
        raise UsageError("--kubeconfig needs --control-url (the proxy's control plane) and exactly one "
                         "--scheduler (the one already running behind the proxy)")
    if plane is not None and plane.scheduler != schedulers[0]:
        plane = None  # it runs another scheduler (or none): the one under test is not the rig's to restart
    yunikorn = args.yunikorn_url or (plane.yunikorn_url if plane is not None else None)
    return Target(Kube.from_kubeconfig(args.kubeconfig), control, yunikorn, plane), schedulers


def _gates_for(gates: feature_gates.Gates, scheduler: str) -> feature_gates.Gates:
    """The gates for a run with this scheduler: kube-scheduler's only go to kube-scheduler runs."""
    return {c: g for c, g in gates.items() if c != "kube-scheduler" or scheduler == "kube-scheduler"}


def _report(directories: list[Path]) -> int:
    """Print a report directory's summary again (the side-by-side table of a multi-run report); with
    several, their runs side by side (rig.compare: the proxy's outage beside a real kill, one build beside
    another)."""
    runs = []
    for directory in directories:
        try:
            doc = json.loads((directory / "report.json").read_text())
            if len(directories) > 1:
                runs += compare.runs_of(doc)
            elif "runs" in doc:
                print(write_summary(directory, doc["runs"]))
            else:
                print((directory / "summary.md").read_text())
        except (OSError, KeyError, TypeError, json.JSONDecodeError) as e:
            print(f"kube-fault-proxy report: {directory}: not a scenario report ({type(e).__name__}: {e})",
                  file=sys.stderr)
            return USAGE
    if len(directories) > 1:
        print(compare.compare(runs))
    return OK


def run(args: argparse.Namespace) -> int:
    """Dispatch scenario, report and demo."""
    state_dir = args.state_dir or default_state_dir().parent / "scenarios"
    try:
        if args.command == "report":
            return _report(args.directories)
        builds = ([Contender("yunikorn", patch=p) for p in args.yunikorn_patch or []]
                  + [Contender("yunikorn", source=d) for d in args.yunikorn_source or []]
                  + [Contender("kube-scheduler", patch=_kube_patch(p))
                     for p in getattr(args, "kube_scheduler_patch", None) or []])
        if args.command == "demo":  # kube-scheduler, YuniKorn v1.9.0, YuniKorn v1.9.0 with the fix
            path, schedulers, repeat, seed = shipped.SCENARIOS / "yunikorn-3355.yaml", None, 1, args.seed
            builds, with_release = builds or [Contender("yunikorn", patch=DEMO_FIX)], True
        else:
            path, schedulers, repeat, seed = args.file, args.scheduler, args.repeat, args.seed
            with_release = args.with_release
        existing = None
        if getattr(args, "kubeconfig", None) is not None:
            existing, schedulers = _existing(args, schedulers)
        if existing is not None and builds:
            raise UsageError("--yunikorn-patch, --yunikorn-source and --kube-scheduler-patch build a scheduler "
                             "for a local run, not for --kubeconfig")
        gates = feature_gates.collect(args.feature_gates)
        if existing is not None and gates:
            raise UsageError("--feature-gates start a local control plane's components with those gates, "
                             "not --kubeconfig's cluster")
        code, table, out = run_scenarios(path, schedulers, seed, repeat, args.output, args.profiles, state_dir,
                                         existing, builds, with_release, gates, args.kubernetes)
    except ProfileError as e:
        print(e, file=sys.stderr)
        return USAGE
    except (UsageError, ConfigError, ValueError) as e:
        print(f"kube-fault-proxy scenario: {e}", file=sys.stderr)
        return USAGE
    except (ClusterError, build.BuildError) as e:
        print(f"kube-fault-proxy: {e}", file=sys.stderr)
        return USAGE if isinstance(e, build.BuildInputError) else FAILED
    except OSError as e:
        print(f"kube-fault-proxy: {e}", file=sys.stderr)
        return USAGE
    runs = json.loads((out / "report.json").read_text())["runs"]
    show_table(SUMMARY_HEADERS, summary_rows(runs, no="no"), table)
    print(f"report: {out}/summary.md, timelines: {out}/*/timeline.html")
    return code


def add_arguments(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The `scenario`, `report` and `demo` subcommands."""
    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--seed", type=int, default=1, help="first seed (runs k use seed + k)")
        p.add_argument("-o", "--output", type=Path, help="report directory (default: reports/<name>-<time>)")
        p.add_argument("--profiles", type=Path, metavar="DIR", help="profile library (default: ./fault_profiles "
                       "if it exists, else the one the package ships)")
        p.add_argument("--state-dir", type=Path, help="where the runs' clusters live")
        p.add_argument("--yunikorn-patch", type=_patch, metavar="FILE", nargs="+", action="extend",
                       help="YuniKorn runs use v1.9.0 with this unified diff applied (built once, cached by its "
                            "hash); several: one set of runs per patch"
                       + (f"; default {DEMO_FIX.stem}" if p.prog.endswith("demo") else ""))
        p.add_argument("--yunikorn-source", type=Path, metavar="DIR", nargs="+", action="extend",
                       help="YuniKorn runs use this yunikorn-k8shim checkout (built once per content hash)")
        add_target_arguments(p)

    sp = sub.add_parser("scenario", help="run a scenario end to end and write a report")
    ssub = sp.add_subparsers(dest="scenario_command", required=True, metavar="ACTION")
    r = ssub.add_parser("run", help="run a scenario file")
    r.add_argument("file", type=_scenario, help="a scenario file, or the name of a shipped one "
                   f"({', '.join(shipped.names(shipped.SCENARIOS, '.yaml'))})")
    r.add_argument("--scheduler", action="append", choices=["kube-scheduler", "yunikorn"],
                   help="run with this scheduler (repeatable; default: every scheduler the scenario expects)")
    r.add_argument("--repeat", type=int, default=1, help="runs per scheduler, with seeds seed..seed+K-1")
    r.add_argument("--kubeconfig", type=Path, help="run on this existing cluster instead of a local one "
                                                   "(admin access; its scheduler already behind the proxy); the "
                                                   "admin kubeconfig of a plane `cluster up --proxy` brought up "
                                                   "runs on that plane, which may restart its scheduler")
    r.add_argument("--control-url", help="with --kubeconfig: the proxy's control plane (default: a local plane's)")
    r.add_argument("--yunikorn-url", help="with --kubeconfig: YuniKorn's REST API (enables I1-I5; default: a "
                                          "local plane's)")
    r.add_argument("--kube-scheduler-patch", type=Path, metavar="FILE", nargs="+", action="extend",
                   help="kube-scheduler runs use the Kubernetes release (--kubernetes) with this unified diff to "
                        "k8s.io/kubernetes applied (built once, cached by its hash); several: one set of runs per "
                        "patch")
    r.add_argument("--with-release", action="store_true",
                   help="with --yunikorn-patch/--yunikorn-source/--kube-scheduler-patch: run that scheduler as "
                        "released too, first")
    common(r)
    rp = sub.add_parser("report", help="print (and re-render) a report directory's summary; with several, their "
                        "runs side by side (one column per scenario and build)")
    rp.add_argument("directories", type=Path, nargs="+", metavar="DIRECTORY", help="report directories")
    rp.add_argument("--state-dir", type=Path, help="accepted as in scenario run; a report reads nothing from it")
    dp = sub.add_parser("demo", help="YUNIKORN-3355 on the local control plane: kube-scheduler, YuniKorn v1.9.0 and "
                                     "v1.9.0 with the fix, side by side")
    common(dp)


def _scenario(text: str) -> Path:
    return shipped.scenario(Path(text))


def _patch(text: str) -> Path:
    return shipped.yunikorn_patch(Path(text))


def _kube_patch(path: Path) -> Path:
    """A kube-scheduler patch, refused (ValueError, before anything is built or started) unless it reads as a
    unified diff."""
    patches.check_file(path, f"--kube-scheduler-patch {path}")
    return path
