"""The planned search phase (`search --plan`): one fault-free reference run recorded (or an earlier one read back,
`--plan-from DIR`), its causal points (causal.py), the plan (plans.py), and the plan's trials in order within the
budget, each hit filed as the random search files it; the plan's coverage kept on the outcome for the report."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from kube_fault_proxy.rig.invariants.history import History
from kube_fault_proxy.rig.search import causal, differential, plans, resume, waist
from kube_fault_proxy.rig.search.genome import Genome
from kube_fault_proxy.rig.search.outcome import Outcome, Settings
from kube_fault_proxy.rig.search.trial import CANARY, Rig, Tier, TrialResult, run_trial


class Search(Protocol):
    """What the planned phase asks of the search loop (engine.Search), named here so neither imports the other."""

    s: Settings
    note: Callable[[str], None]
    progress: Callable[[Outcome], None] | None
    waist: waist.Waist
    records: resume.Records
    step_seconds: float
    step: str

    def rig(self, key: str) -> Rig: ...

    def trial(self, scheduler: str, genome: Genome, name: str, tier: Tier = ...) -> TrialResult: ...

    def learn(self, g: Genome, result: TrialResult) -> None: ...

    def baseline(self, scheduler: str, genome: Genome) -> differential.Baseline | None: ...

    def elapsed(self) -> float: ...

    def file_hit(self, number: int, g: Genome, result: TrialResult, out: Outcome) -> str: ...


REFERENCE = "reference.json"  # in the output directory: the reference run a plan was made from
PLAN = "plan.json"


def reference_doc(target: str, genome: Genome, history: History, journal: list[dict[str, Any]],
                  phases: list[tuple[str, float]], until: float | None) -> dict[str, Any]:
    """The reference file (REFERENCE): what a plan is made from (and `--plan-from DIR` reads back)."""
    return {"target": target, "genome": json.loads(genome.canonical()), "history": history.as_dict(),
            "journal": journal, "phases": [[n, t] for n, t in phases], "until": until}


def read_reference(directory: Path, target: str) -> tuple[Genome, list[causal.Point], dict[str, Any]]:
    """An earlier reference run (its REFERENCE file in `directory`): its workload and its causal points;
    ReferenceError names the file and the field that is wrong."""
    return read_reference_file(directory / REFERENCE, target)


def read_reference_file(path: Path, target: str) -> tuple[Genome, list[causal.Point], dict[str, Any]]:
    """A reference run's file, read as `read_reference` reads it."""
    try:
        doc = json.loads(path.read_text())
        g = doc["genome"]
        genome = Genome(rules=(), pods=int(g["pods"]), action=g["action"], seed=int(g["seed"]), nodes=g.get("nodes"),
                        shape=str(g.get("shape", "roomy")), origin="reference")
        history = History.from_dict(doc["history"])
        phases = [(str(n), float(t)) for n, t in doc["phases"]]
    except OSError as e:
        raise causal.ReferenceError(f"{path}: cannot read it ({e.strerror})") from None
    except (ValueError, KeyError, TypeError) as e:
        raise causal.ReferenceError(f"{path}: not a reference run ({type(e).__name__}: {e})") from None
    if doc.get("target") != target:
        raise causal.ReferenceError(f"{path}: field 'target' is {doc.get('target')!r}; this search's is {target!r}")
    until = doc.get("until")
    return genome, causal.points(history, doc.get("journal") or [], waist.of(target, (genome.shape,)), phases,
                                         until), doc


def record_reference(search: Search) -> tuple[Genome, list[causal.Point], dict[str, Any]]:
    """A fault-free run of the plan's workload, recorded; ReferenceError when it broke something or failed."""
    s = search.s
    genome = Genome(rules=(), pods=s.pods, action=None, seed=s.seed, shape=s.shapes[0], origin="reference")
    search.note(f"recording the reference run ({genome.pods} pods, {genome.shape}, no fault)")
    r = run_trial(search.rig(s.scheduler), genome, "ref", CANARY, search.note, record=True)
    if r.error or r.broken or r.recorded is None:
        why = r.error or ", ".join(r.broken) or "no history"
        raise causal.ReferenceError(f"the reference run was not clean: {why}")
    doc = reference_doc(s.scheduler, genome, r.recorded, r.journal or [], r.phases, r.faults_end)
    return genome, causal.points(r.recorded, r.journal or [], search.waist, r.phases, r.faults_end), doc


def run(search: Search, out: Outcome) -> None:
    """The planned search: reference, plan, the plan's trials in order until the budget or the trial cap ends."""
    s = search.s
    # A search that continues (the same -o, not --fresh) takes its own reference run again: the same plan.
    source = s.plan_from or (s.out if search.records.by_name and (s.out / REFERENCE).is_file() else None)
    try:
        if source is not None:
            genome, points, doc = read_reference(source, s.scheduler)
            search.note(f"the reference run of {source / REFERENCE}: {len(points)} causal points")
        else:
            genome, points, doc = record_reference(search)
    except causal.ReferenceError as e:
        out.plan_error = str(e)
        search.note(f"no plan: {e}")
        return
    (s.out / REFERENCE).write_text(json.dumps(doc, separators=(",", ":")))
    plan = plans.build(points, s.kinds, search.waist, s.seed, s.plan_per_group, s.actions)
    plan.save(s.out / PLAN)
    cov = plans.PlanCoverage(plan)
    search.step = "p"
    out.plan = cov.as_dict()
    search.note(f"the plan: {len(plan.perturbations)} perturbations at {len(plan.points)} points "
                f"({len(points)} causal points, {len(plan.groups)} groups)")
    for number, pert in enumerate(plan.perturbations):
        if search.elapsed() >= s.budget or (s.max_trials is not None and number >= s.max_trials):
            break
        search.step_seconds = 0.0
        g = genome.with_(rules=pert.rules, churn=pert.churn, origin=f"plan:{pert.point}")
        result = search.trial(s.scheduler, g, f"p{number}")
        out.trials.append(result)
        search.learn(g, result)
        base = search.baseline(s.scheduler, g) if s.differential else None
        cov.add(pert, result.fired, None if result.error else result.end_state,
                base.masked if base is not None else frozenset(), result.broken)
        out.plan = cov.as_dict()
        if search.progress is not None:
            search.progress(out)
        hit = result.hit and not result.error
        verdict = search.file_hit(number, g, result, out) if hit else None
        out.spent.add(verdict, search.step_seconds)
    out.search_seconds = search.elapsed()
