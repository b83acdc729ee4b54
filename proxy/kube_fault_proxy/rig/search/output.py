"""What a search leaves in its directory: report.md (with an index of the distinct findings),
minimal-profile.yaml, replay-scenario.yaml and search.json (what `search replay` reads) for the first
finding, trials.jsonl (every trial, written as it ran), and findings/<n>-<signature>/ with the same files
for each distinct finding."""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from kube_fault_proxy import __version__, shipped
from kube_fault_proxy.rig.actions import trial_churn
from kube_fault_proxy.rig.cluster import versions
from kube_fault_proxy.rig.invariants.catalogue import INVARIANTS, label
from kube_fault_proxy.rig.invariants.node_loss import NODE_LOSS
from kube_fault_proxy.rig.invariants.safety import SAFETY
from kube_fault_proxy.rig.runs.report import timeline_svg
from kube_fault_proxy.rig.runs.scenario import load_scenario
from kube_fault_proxy.rig.search import coverage, plans
from kube_fault_proxy.rig.search.differential import DIVERGED
from kube_fault_proxy.rig.search.findings import Finding, kinds_on_matches, with_actions
from kube_fault_proxy.rig.search.genome import Genome
from kube_fault_proxy.rig.search.outcome import UNFAULTED, Outcome, same_judge
from kube_fault_proxy.rig.search.report_known import known_lines
from kube_fault_proxy.rig.search.waist import CONTROLLER_MANAGER

MINIMAL = "search-minimal"
INVARIANT_NAMES = ("stranded", "missing-node", *SAFETY, "I1", "I2", "I3", "I4", "I5", *NODE_LOSS)
# Witness pods: a broken promise first (a double-booked node is the worst form of the bind bugs),
# then phantoms (the rarest, most telling of YuniKorn's bookkeeping), the rest after.
WITNESS_ORDER = (*SAFETY, "I2", "I1", "I4", "missing-node", "I3", "stranded", "I5", *NODE_LOSS)


def _commit() -> str:
    """The checkout's commit when running from one; an installed package says its version."""
    checkout = shipped.HOME.parents[1]
    if not (checkout / ".git").exists():
        return f"v{__version__}"
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                              cwd=checkout).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def scenario_doc(genome: Genome, scheduler: str, control: str | None, target: list[str], nodes: int) -> dict[str, Any]:
    """A Scenario that replays the minimal profile with `scenario run` (fixed times stand in for the
    trial's quiescence: the faults are switched off 8 s after the load, as a trial does once quiet)."""
    timeline: list[dict[str, Any]] = [{"at": "0s", "activate": MINIMAL}]
    note = ""
    if genome.action == "touchPods":
        timeline.append({"onEvent": "load-done", "after": "6s", "touchPods": True})
    elif genome.action == "deletePods":
        note = " The trial also deleted every fifth pod once quiet; a scenario cannot say that, so it does not."
    if genome.churn:
        note += (" The trial also did node and pod churn during the load ("
                 + "; ".join(trial_churn.summary(a) for a in genome.churn)
                 + "); this scenario does not (`search replay` does).")
    if genome.shape != "roomy":
        note += (f" The search ran it on the {genome.shape} workload shape; a scenario's load is the roomy one "
                 "(`search replay` keeps the shape).")
    timeline.append({"onEvent": "load-done", "after": "8s", "deactivate": True})
    expect: dict[str, Any] = {scheduler: {"verdict": "violations",
                                          "invariants": [i for i in target if i in INVARIANT_NAMES]}}
    if control is not None and control != UNFAULTED and not control.startswith(("gates:", "build:")):  # a scheduler
        expect[control] = {"verdict": "clean"}
    return {"apiVersion": "kube-fault-proxy/v1", "kind": "Scenario",
            "metadata": {"name": "search-minimal-replay",
                         "description": f"Replays the minimal profile found by `kube-fault-proxy search`.{note}"},
            "spec": {"cluster": {"nodes": nodes}, "load": {"count": genome.pods, "rate": 200, "concurrency": 8},
                     "timeline": timeline, "settle": {"quiet": "20s", "timeout": "240s", "grace": "0s"},
                     "expect": expect}}


def control_text(control: str | None, broken: list[str] | None) -> str:
    """How a report names the control's verdict: `no control run` when none ran."""
    if control is None or broken is None:
        return "no control run"
    who = "the same workload without the profile" if control == UNFAULTED else control
    return f"control ({who}) {', '.join(broken) or 'clean'}"


def finding_view(out: Outcome, found: Finding, index: int) -> Outcome:
    """The outcome as one finding's report sees it (its directory, its hits, its minimal case)."""
    settings = replace(out.settings, out=out.settings.out / "findings" / found.slug(index))
    return replace(out, settings=settings, hits=list(found.hits), confirmed=found.first, target=found.target,
                   shrunk=found.shrunk, replays=found.replays, minimal_control=found.minimal_control,
                   witness=found.witness, shrink_seconds=found.shrink_seconds, findings=[found])


def write(out: Outcome, argv: list[str]) -> Path:
    """Write every file, each finding's directory first; returns the top report.md's path. A finding's directory is
    named by its place and signature, both of which change as findings come, merge and shrink while the report is
    rewritten: a directory an earlier writing made for a name no finding has now goes (only one of this search's
    own: `<n>-<signature>` holding its report.md and search.json)."""
    current = {found.slug(i) for i, found in enumerate(out.findings, 1)}
    for i, found in enumerate(out.findings, 1):
        _write_one(finding_view(out, found, i), argv, index=False)
    _remove_stale_findings(out.settings.out / "findings", current)
    return _write_one(out, argv, index=True)


def _remove_stale_findings(where: Path, current: set[str]) -> None:
    if not where.is_dir():
        return
    for d in where.iterdir():
        ours = d.is_dir() and d.name.split("-", 1)[0].isdigit() and all(
            (d / f).is_file() for f in ("report.md", "search.json"))
        if ours and d.name not in current:
            shutil.rmtree(d)


def _write_one(out: Outcome, argv: list[str], index: bool) -> Path:
    s, d = out.settings, out.settings.out
    d.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "argv": argv, "commit": _commit(), "scheduler": s.scheduler, "control": s.control, "seed": s.seed,
        "build": out.builds.get(s.scheduler), "controlBuild": out.builds.get(s.control or ""),
        "featureGates": s.feature_gates, "kubernetes": s.kubernetes,
        "workloads": list(s.workloads) if s.scheduler == CONTROLLER_MANAGER else None,
        "yunikornPatch": str(s.yunikorn_patch.resolve()) if s.yunikorn_patch else None,
        "yunikornSource": str(s.yunikorn_source.resolve()) if s.yunikorn_source else None,
        "kubeSchedulerPatch": str(s.kube_scheduler_patch.resolve()) if s.kube_scheduler_patch else None,
        "kinds": list(s.kinds), "nodes": s.nodes, "pods": s.pods, "budgetSeconds": s.budget,
        "budgets": {"searchSeconds": s.budget, "maxTrials": s.max_trials, "shrinkSecondsPerFinding": s.shrink_budget,
                    "shrinkSecondsTotal": s.shrink_total, "replays": s.replays, "canaryEvery": s.canary_every},
        "trials": len(out.trials), "medianTrialSeconds": round(out.median_trial(), 1),
        "trialsPerHour": round(out.trials_per_hour()),
        "searchTierRuns": len(out.fast_seconds),
        "searchTierMedianSeconds": round(statistics.median(out.fast_seconds), 1) if out.fast_seconds else None,
        "searchSeconds": round(out.search_seconds, 1),
        "shrinkSeconds": round(out.shrink_seconds, 1), "totalSeconds": round(out.total_seconds, 1),
        "hits": [h.as_dict() for h in out.hits], "target": out.target, "corpus": out.corpus,
        "bestNearMiss": out.best_near_miss, "shapes": list(s.shapes),
        "injectedNothing": out.injected_nothing, "injectedNothingShare": round(out.injected_nothing_share(), 3),
        "prechecked": out.prechecked,
        "coverage": coverage.coverage(out.trials, s.kinds, out.tokens, out.novel, out.dead_forms),
        "canaries": [{"name": c.name, "shape": c.genome.shape, "broken": c.broken, "error": c.error}
                     for c in out.canaries],
        "findings": [f.as_dict(i) for i, f in enumerate(out.findings, 1)] if index else [],
        "phase": out.phase, "interrupted": out.interrupted, "resumedSteps": out.resumed,
        "includeKnown": s.include_known, "budgetShares": out.spent.as_dict(), "precision": out.precision(),
        "known": [{"id": k.entry.id, "title": k.entry.title, "upstream": k.entry.upstream, "trials": k.trials,
                   "confirmedAt": k.confirmed_at} for k in out.known.values()],
        "processes": out.pids, "plan": out.plan, "planError": out.plan_error}
    minimal = out.shrunk.genome if out.shrunk is not None else None
    if minimal is not None:
        (d / "minimal-profile.yaml").write_text(minimal.to_yaml(MINIMAL, _description(out)))
        if s.scheduler != CONTROLLER_MANAGER:  # a scenario's load is pods for a scheduler; `search replay` is all
            scenario = d / "replay-scenario.yaml"  # kube-controller-manager's workloads have
            scenario.write_text(yaml.safe_dump(scenario_doc(minimal, s.scheduler, s.control, out.target,
                                                            minimal.nodes or s.nodes),
                                               sort_keys=False))
            load_scenario(scenario)  # it must load, as `scenario run` will load it
        doc.update(minimal=json.loads(minimal.canonical()), replays=out.replays, reproduced=out.reproduced,
                   minimalControl=out.minimal_control,
                   shrinkSteps=[st.as_dict() for st in out.shrunk.steps] if out.shrunk else [])
    if out.witness is not None and out.witness.samples:
        (d / "timeline.svg").write_text(timeline_svg(witness_run(out)))
    (d / "search.json").write_text(json.dumps(doc, indent=1))
    report = d / "report.md"
    report.write_text(_markdown(out, doc, index))
    return report


def witness_run(out: Outcome) -> dict[str, Any]:
    """The first reproducing replay of the minimal case, shaped as a scenario run for timeline_svg."""
    w = out.witness
    assert w is not None
    return {"scenario": "search minimal case", "scheduler": out.settings.scheduler, "seed": w.genome.seed,
            "build": out.builds.get(out.settings.scheduler),
            "samples": w.samples, "events": w.events, "steps": w.steps, "check": w.check,
            "load": {"requested": w.genome.pods}, "met": None}


def _description(out: Outcome) -> str:
    assert out.confirmed is not None
    return (f"Found by kube-fault-proxy search (seed {out.settings.seed}, trial {out.confirmed.trial}) on "
            f"{out.settings.scheduler}; breaks {', '.join(out.target)}; shrunk from "
            f"{len(out.confirmed.genome.rules)} rules.")


def _evidence(out: Outcome) -> list[str]:
    """The injected-nothing share and the canaries."""
    s, broken = out.settings, out.broken_canaries()
    lines = [f"- {out.injected_nothing} of {len(out.trials)} search trials ({out.injected_nothing_share():.0%}) "
             f"injected nothing: no evidence either way, never counted as clean; the pre-check redrew "
             f"{out.prechecked} genomes no rule of which could fire on the workload",
             f"- {len(out.canaries)} fault-free canaries (every {s.canary_every}th trial): "
             + (f"{len(broken)} broke invariants with no fault active, the rig's or the workload's problem "
                f"(never a finding): " + "; ".join(f"{c.name} ({c.genome.shape}) {', '.join(c.broken)}"
                                                     for c in broken) if broken else "all clean")]
    if s.differential:
        diverged = [t for t in out.trials if t.diverged]
        lines.append(f"- the differential oracle: {s.differential} fault-free runs per workload gave {out.baselines} "
                     f"clean end states ({out.untrusted_baselines} more workloads' clean runs broke something, so "
                     f"they are not judged); {len(diverged)} search trials ended where no clean run did, "
                     f"{sum(1 for t in diverged if t.broken == [DIVERGED])} of them breaking no invariant "
                     f"(`{DIVERGED}`)")
    return lines


def _searched(out: Outcome, doc: dict[str, Any]) -> list[str]:
    """What was searched: the budgets, the seeds, and what the trials covered (whether or not anything was found)."""
    s, b = out.settings, doc["budgets"]
    trials = f"at most {b['maxTrials']} search trials" if b["maxTrials"] is not None else "no trial cap"
    total = (f"no shrink starts after {b['shrinkSecondsTotal']:.0f} s of the shrink phase"
             if b["shrinkSecondsTotal"] is not None else "no cap on the shrink phase")
    control = "none" if s.control is None else (
        "the same workload without the profile" if s.control == UNFAULTED else s.control)
    return ["## What was searched", "",
            f"- budgets: search {b['searchSeconds']:.0f} s ({trials}), then {b['shrinkSecondsPerFinding']:.0f} s of "
            f"shrinking per distinct finding ({total}) and {b['replays']} replays of its minimal case; a fault-free "
            f"canary every {b['canaryEvery'] or 'no'} trials; control: {control}",
            f"- seeds: search seed {s.seed} (trial i is drawn from (seed, i) and the corpus so far; each trial's "
            f"genome, its profile seed included, is in `trials.jsonl`); corpus {out.corpus} of "
            f"{len(out.trials)} trials",
            f"- kinds asked: {', '.join(s.kinds)}; shapes asked: {', '.join(s.shapes)}", "",
            *coverage.lines(doc["coverage"]), "", *_plan(out)]


def _plan(out: Outcome) -> list[str]:
    """A planned search's coverage (`search --plan`): points covered, groups, distinct end states."""
    if not out.settings.plan:
        return []
    head = ["## The plan", "", f"- reference run: {out.settings.plan_from or 'recorded by this search'} "
            f"(`reference.json`); the plan: `plan.json`; {out.settings.plan_per_group} points kept per group"]
    if out.plan is None:
        return [*head, f"- no plan: {out.plan_error or 'not made yet'}", ""]
    return [*head, *plans.lines(out.plan), ""]


def _index(out: Outcome) -> list[str]:
    """The distinct findings, each with its reproduction rate and report directory."""
    if not out.findings:
        return []
    contained = sum(f.contained for f in out.findings)
    unshrunk = sum(1 for f in out.findings if f.shrunk is None)
    lines = [f"## Findings: {len(out.findings)} distinct", "",
             f"Shrunk: {len(out.findings) - unshrunk}; not shrunk (the total shrink budget spent): {unshrunk}; "
             f"confirmed hits filed under an earlier minimal case their drawn profile contains, unshrunk: "
             f"{contained}.", "",
             "| # | invariants broken | fault kinds and matches (minimal profile) | found at trials | reproduced "
             "| control | report |", "|---|---|---|---|---|---|---|"]
    for i, f in enumerate(out.findings, 1):
        known = f" (known: {f.known})" if f.known else ""
        kinds = with_actions("; ".join(f.signature[1:]) or "-", f.minimal)
        lines.append(f"| {i} | {', '.join(label(t) for t in f.target)}{known} | {kinds} | "
                     f"{', '.join(str(h.trial) for h in f.hits)} | {f.rate()} | "
                     f"{control_text(out.settings.control, f.minimal_control)} | "
                     f"[findings/{f.slug(i)}](findings/{f.slug(i)}/report.md) |")
    return [*lines, "", "The first finding's minimal case is also at the top (`minimal-profile.yaml`, "
                        "`search replay` of this directory).", ""]


def _markdown(out: Outcome, doc: dict[str, Any], index: bool = True) -> str:
    s = out.settings
    lines = [f"# kube-fault-proxy search: {doc['build'] or s.scheduler}", ""]
    lines += [f"- search seed {s.seed}, kinds {', '.join(s.kinds)}; {s.nodes} nodes, {s.pods} pods per trial; "
              f"rig commit {doc['commit']}",
              f"- {len(out.trials)} search trials; search phase {out.search_seconds:.0f} s (with control-plane "
              f"starts and confirmation); median trial "
              f"{out.median_trial():.1f} s, **{out.trials_per_hour():.0f} trials/hour**; corpus {out.corpus}, "
              f"best near miss (allocations - bound) {out.best_near_miss}",
              f"- every search-tier run (search trials and shrink candidates): {len(out.fast_seconds)}, median "
              f"{doc['searchTierMedianSeconds']} s", *_evidence(out), ""]
    if doc.get("controlBuild"):  # the control's exact build: a patched one's name and hash, or its gates
        lines.insert(3, f"- control {s.control}: {doc['controlBuild']}")
    lines = lines[:2] + _state(out) + lines[2:]
    if index:
        lines += precision_lines(out)
        lines += known_lines(out)
        lines += _index(out)
        lines += _searched(out, doc)
    if out.confirmed is None:
        lines += ["**No confirmed violation within the budget.**", ""]
    elif out.shrunk is None:
        drawn, replay = out.confirmed.genome, ", ".join(out.confirmed.replay or []) or "nothing"
        lines += [f"## Confirmed, not shrunk: {', '.join(label(i) for i in out.target)}", "",
                  f"- found at trial {out.confirmed.trial}; replay broke {replay}; "
                  f"{control_text(s.control, out.confirmed.control)}",
                  f"- not shrunk and not replayed: {_unshrunk_reason(out)}. Its drawn profile, as the trial ran it:",
                  "", "```yaml",
                  drawn.to_yaml(MINIMAL, f"Drawn by kube-fault-proxy search (seed {s.seed}, trial "
                                         f"{out.confirmed.trial}); breaks {', '.join(out.target)}; "
                                         "not shrunk.").rstrip(),
                  "```", ""]
    else:
        minimal = out.shrunk.genome if out.shrunk else out.confirmed.genome
        rate = f"{out.reproduced}/{len(out.replays)}"
        spent = " (shrink budget spent)" if out.shrunk and out.shrunk.out_of_budget else ""
        lines += [f"## Confirmed: {', '.join(label(i) for i in out.target)}", "",
                  f"- found at trial {out.confirmed.trial} (of {len(out.trials)} in {out.search_seconds:.0f} s); "
                  f"replay broke "
                  f"{', '.join(out.confirmed.replay or []) or 'nothing'}; "
                  f"{control_text(s.control, out.confirmed.control)}",
                  f"- shrunk in {out.shrink_seconds:.0f} s from {len(out.confirmed.genome.rules)} rules to "
                  f"**{len(minimal.rules)}** ({minimal.pods} pods, "
                  f"{minimal.nodes or s.nodes} of the rig's {s.nodes} nodes schedulable, shape {minimal.shape}){spent}",
                  f"- minimal profile replayed {len(out.replays)} times: **{rate}** reproduce "
                  f"{', '.join(out.target)} (runs: {'; '.join(', '.join(r) or 'clean' for r in out.replays)}); "
                  f"{control_text(s.control, out.minimal_control)} under it", "",
                  "Reproduce:", "", "```sh", f"kube-fault-proxy search replay {s.out}",
                  *([] if s.scheduler == CONTROLLER_MANAGER or s.kube_scheduler_patch else [  # no such scenario run
                      f"kube-fault-proxy scenario run {s.out}/replay-scenario.yaml --profiles {s.out} "
                      f"--scheduler {s.scheduler} --seed {minimal.seed}"
                      + (f" --yunikorn-patch {s.yunikorn_patch}" if s.yunikorn_patch else "")
                      + (f" --yunikorn-source {s.yunikorn_source}" if s.yunikorn_source else "")
                      + (f" --kubernetes {s.kubernetes}" if s.kubernetes != versions.KUBERNETES else "")]),
                  "```", "",
                  "## Minimal profile (`minimal-profile.yaml`)", "", "```yaml",
                  (s.out / "minimal-profile.yaml").read_text().rstrip(), "```", "",
                  "What each invariant means: " + "; ".join(f"{label(i)}: {INVARIANTS[i].meaning}"
                                                            for i in out.target if i in INVARIANTS), ""]
        lines += _witnesses(out)
        lines += ["## Shrink log", "", "| step | accepted | runs (broken) | s |", "|---|---|---|---|"]
        for st in out.shrunk.steps if out.shrunk else []:
            runs = " / ".join(", ".join(r) or "clean" for r in st.runs)
            lines.append(f"| {st.what} | {'yes' if st.accepted else 'no'} | {runs} | {st.seconds:.0f} |")
        lines.append("")
    lines += ["## Hits", "", "| trial | broken | replay | control | verdict | the ledger |",
              "|---|---|---|---|---|---|"]
    for h in out.hits:
        replay = (", ".join(h.replay) or "clean") if h.replay is not None else "-"
        verdict = f"known: {h.known}" if h.verdict == "known" else h.verdict
        ledger = (h.known if h.verdict == "excused" else h.ledger) or "-"
        lines.append(f"| {h.trial} | {', '.join(h.broken)} | {replay} | "
                     f"{', '.join(h.control or []) or ('clean' if h.control is not None else '-')} | {verdict} | "
                     f"{ledger.replace('|', '/')} |")
    rig = [h for h in out.hits if h.verdict == "control-broken"]
    why = ("all of their invariants too (the faults' effect, or a bug the control has too)" if same_judge(s.control)
           else "one of their invariants too (the rig's or the workload's fault, not the scheduler's)")
    lines += ["", f"Hits where the control broke {why}: {len(rig)}.", ""]
    shared = [h for h in out.hits if h.verdict == "confirmed" and h.shared]
    if shared:
        lines += [f"Confirmed on what the control ({s.control}, judged by the same invariants) kept: it broke some of "
                  "the hit's invariants too, the faults' effect, left out of the finding: "
                  + "; ".join(f"trial {h.trial}: {', '.join(h.target)} confirmed, {', '.join(h.shared)} shared"
                              for h in shared) + ".", ""]
    own = {h.trial: sorted(set(h.control or []) - set(h.broken)) for h in out.hits if h.verdict == "confirmed"}
    if own := {trial: broke for trial, broke in own.items() if broke}:
        lines += [f"The control ({s.control}) broke other invariants than the hit's under the same profile: its own "
                  "violations, not evidence against the scheduler under test, and worth a look of their own: "
                  + "; ".join(f"trial {trial}: {', '.join(label(i) for i in broke)}" for trial, broke in own.items())
                  + ".", ""]
    if index:
        lines += trial_lines(out)
    lines += ["Every trial (genome, broken invariants, seconds) is in `trials.jsonl`.", ""]
    return "\n".join(lines)


def trial_lines(out: Outcome) -> list[str]:
    """Every search trial and canary, in order."""
    verdicts = {h.trial: (f"known: {h.known}" if h.verdict == "known" else h.verdict) for h in out.hits}
    runs = sorted([*out.trials, *out.canaries], key=lambda r: int(r.name[1:]) if r.name[1:].isdigit() else 0)
    lines = ["## Trials", "", "| trial | fault kinds and matches | broken | injections | s | verdict |",
             "|---|---|---|---|---|---|"]
    for r in runs:
        number = int(r.name[1:]) if r.name[1:].isdigit() else -1
        kinds = with_actions("; ".join(sorted(kinds_on_matches(r.genome))) or "none (canary)", r.genome)
        lines.append(f"| {r.name} | {kinds} | "
                     f"{', '.join(r.broken) or ('error' if r.error else 'clean')} | {r.injections} | "
                     f"{r.seconds:.0f} | {verdicts.get(number, '-') if r.name.startswith('t') else 'canary'} |")
    return [*lines, ""]


def precision_lines(out: Outcome) -> list[str]:
    """The precision figure: every hit accounted for, and how far each confirmed finding was checked."""
    p = out.precision()
    replays = ", ".join(f"{r['reproduced']}/{r['of']}" for r in p["findingReplays"]) or "none"
    control = out.settings.control
    if control is None:
        controls = ("no control was set: a hit the faults alone cause cannot be told from a bug; confirmed means "
                    "the replay broke it again")
    else:
        who = "the same workload without the profile" if control == UNFAULTED else control
        n = out.settings.controls
        controls = (f"up to {n} control run{'s' if n != 1 else ''} ({who}) per hit that repeated and per minimal "
                    f"case; the first control run that breaks one of the hit's invariants makes it the faults' "
                    f"effect (the rest are not run), and a hit is confirmed only when all {n} stayed clean of them")
    filed = f"{p['confirmed'] / p['hits']:.0%}" if p["hits"] else "-"
    return ["## Precision", "",
            f"- {p['hits']} hits: **{p['excusedByLedger']} excused by the ledger** (the fault's own effect, read "
            f"from the proxy's journal); {p['faultsEffect']} the faults' effect (the control broke the same); "
            f"{p['didNotRepeat']} did not repeat on replay; {p['noInjection']} with nothing injected; "
            f"{p['known']} known bugs; {p['unconfirmed']} not yet confirmed; **{p['confirmed']} confirmed** "
            f"({filed} of the hits), {p['findings']} distinct findings",
            f"- each distinct finding's minimal case reproduced: {replays} (replays out of "
            f"{out.settings.replays} asked)",
            f"- controls: {controls}", ""]


def _state(out: Outcome) -> list[str]:
    """Whether the search is still running, was interrupted, or resumed an earlier run."""
    lines = []
    if out.phase in ("searching", "shrinking"):
        lines.append(f"**Written while {out.phase}**: the search rewrites this report as it confirms findings; "
                     "a search killed now leaves it as it is.")
    if out.interrupted:
        lines.append(f"**Interrupted by {out.interrupted}** after {len(out.trials)} search trials: every process it "
                     "started was stopped; what it did so far is below. Run the same command (same `-o` and "
                     "`--seed`) to continue from the next trial.")
    if out.resumed:
        lines.append(f"Resumed: {out.resumed} search steps were taken from `trials.jsonl` (an earlier run's), "
                     "not run again.")
    return [*lines, ""] if lines else []


def _unshrunk_reason(out: Outcome) -> str:
    """Why a confirmed finding has no minimal case."""
    if out.interrupted:
        return f"the search was interrupted ({out.interrupted}) before it was shrunk"
    if out.phase in ("searching", "shrinking"):
        return "the search had not shrunk it yet when this report was written"
    return f"the total shrink budget ({out.settings.shrink_total or 0:.0f} s) was spent before its turn"



def _witnesses(out: Outcome) -> list[str]:
    w = out.witness
    if w is None:
        return ["## Witness pods", "", "No replay of the minimal case broke the invariants; no witness.", ""]
    lines = ["## Witness pods (from the first reproducing replay's journal)", ""]
    if w.samples:
        lines += ["![The first reproducing replay: pods bound and pending, binds/s, the profile's window]"
                  "(timeline.svg)", ""]
    violations = w.check.get("violations", [])
    chosen: list[tuple[str, dict[str, Any]]] = []
    for v in violations:
        for obj in v.get("objects", []):
            pod = obj.split("/")[-1]
            if pod not in [c[0] for c in chosen]:
                chosen.append((pod, v))
    rank = {name: i for i, name in enumerate(WITNESS_ORDER)}
    chosen.sort(key=lambda c: (rank.get(c[1]["invariant"], 99), c[0] not in w.history, c[0]))
    for pod, v in chosen[:3]:
        lines.append(f"- **{pod}**: {label(v['invariant'])}: {v['message']}")
        for step in w.history.get(pod, []) or ["(no faulted request of this pod in the journal)"]:
            lines.append(f"  - {step}")
    return [*lines, ""]
