"""What a search was asked to do (Settings) and what it did (Outcome): its trials, hits, known bugs hit, findings,
and how its budget was spent; plain data the engine fills and the report reads."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kube_fault_proxy.rig.cluster import versions
from kube_fault_proxy.rig.search import control as controls
from kube_fault_proxy.rig.search import known as known_findings
from kube_fault_proxy.rig.search.findings import Finding
from kube_fault_proxy.rig.search.hit import Hit
from kube_fault_proxy.rig.search.shrink import Shrunk
from kube_fault_proxy.rig.search.trial import TrialResult
from kube_fault_proxy.rig.workloads.shapes import SHAPES

UNFAULTED = "unfaulted"  # the control: the same scheduler and workload without the profile
VERDICTS = ("excused", "control-broken", "not-reproduced", "no-injection", "known", "confirmed", "unconfirmed")


@dataclass(frozen=True)
class Settings:
    """What `search` was asked to do."""

    scheduler: str
    control: str | None
    budget: float
    seed: int
    kinds: tuple[str, ...]
    out: Path
    state_dir: Path
    profiles_dir: Path
    nodes: int = 20
    pods: int = 100
    shrink_budget: float = 600.0
    replays: int = 5
    # No finding's shrink starts once this much of the shrink phase is spent (None: every finding is shrunk).
    shrink_total: float | None = 1800.0
    max_trials: int | None = None
    # With scheduler yunikorn: v1.9.0 with this patch, or this shim checkout (build.yunikorn).
    yunikorn_patch: Path | None = None
    yunikorn_source: Path | None = None
    # With scheduler kube-scheduler: its release (`kubernetes`) with this patch (build.kube_scheduler).
    kube_scheduler_patch: Path | None = None
    shapes: tuple[str, ...] = SHAPES  # workload shapes the grammar draws from (rig.shapes)
    canary_every: int = 10  # every n-th trial is a fault-free canary (0: none)
    include_known: bool = False  # confirm, shrink and replay hits of known bugs (and the faults' own effects) too
    known_files: tuple[Path, ...] = ()  # the user's own known-findings catalogues, added to the shipped one
    known_as_new: tuple[str, ...] = ()  # known findings (by id) to treat as new ground: confirmed, shrunk, replayed
    fresh: bool = False  # start from trial 0 even when the output directory holds this search's trials.jsonl
    # The target's feature gates (component -> gate -> on); a `gates:` control runs the same build with others.
    feature_gates: dict[str, dict[str, bool]] = field(default_factory=dict)
    # kube-controller-manager as the target: the workload kinds a trial makes (controller_trial.WORKLOAD_KINDS).
    workloads: tuple[str, ...] = ("replicaset", "deployment", "job", "statefulset", "daemonset")
    # The Kubernetes release of every rig's control plane and kube-scheduler (versions.RELEASES).
    kubernetes: str = versions.KUBERNETES
    # The differential oracle (differential.py): clean runs per workload whose end state a trial is compared with
    # (0: off; at least differential.MIN_CLEAN_RUNS otherwise).
    differential: int = 0
    # Control runs per confirmed hit and per minimal case: a hit is confirmed only when none breaks its invariants.
    controls: int = 3
    # A planned search (planned.py) instead of the random one: its reference run read from this directory (None:
    # recorded first), and the causal points kept per group of equivalent ones.
    plan: bool = False
    plan_from: Path | None = None
    plan_per_group: int = 2
    # The trial actions (node and pod churn, rig/actions/trial_churn.py) the grammar may draw; () draws none.
    actions: tuple[str, ...] = ()


def same_judge(control: str | None) -> bool:
    """Whether a control is judged by the target's own invariants: the target scheduler without the profile, with
    other gates, or as another build; not a scheduler named as the control (judged by its own invariants)."""
    return control == UNFAULTED or controls.is_gates(control) or controls.is_build(control)


def kept_by_control(control: list[str] | None, target: list[str], same_judge: bool = False) -> list[str]:
    """The hit's invariants the control kept (did not break): what the hit is confirmed on. A control that failed
    to run keeps nothing. A control judged by the same invariants (the same scheduler: another build, other gates,
    no fault) takes away only what it broke too: under the same faults the rest is the target's own behaviour
    (a planted bug beside the release's known one). Another scheduler is judged by other invariants (YuniKorn's
    I1-I5 are not judged on kube-scheduler), so a break it shares disqualifies the whole hit."""
    broken = control or []
    if any(c.startswith("error:") for c in broken):
        return []
    if not same_judge:
        return [] if set(broken) & set(target) else list(target)
    return [t for t in target if t not in broken]


@dataclass
class KnownTally:
    """One known bug's hits in this search."""

    entry: known_findings.KnownFinding
    trials: list[int] = field(default_factory=list)
    confirmed_at: int | None = None  # the hit that was confirmed (replayed and controlled) once


@dataclass
class Spent:
    """Search steps and their trial seconds (each step's trial with its replay and control) by where they went."""

    known: list[float] = field(default_factory=list)  # hits of known bugs
    effect: list[float] = field(default_factory=list)  # hits that were the faults' own effect
    new: list[float] = field(default_factory=list)  # everything else: new ground (clean trials, canaries, new hits)

    def add(self, verdict: str | None, seconds: float) -> None:
        """File one step."""
        {"known": self.known, "excused": self.effect}.get(verdict or "", self.new).append(seconds)

    def as_dict(self) -> dict[str, Any]:
        """JSON form: trials and seconds per share."""
        return {k: {"trials": len(v), "seconds": round(sum(v), 1)}
                for k, v in (("known", self.known), ("faultEffect", self.effect), ("newGround", self.new))}


@dataclass
class Outcome:
    """Everything a search did, for the report."""

    settings: Settings
    trials: list[TrialResult] = field(default_factory=list)
    hits: list[Hit] = field(default_factory=list)
    confirmed: Hit | None = None
    target: list[str] = field(default_factory=list)
    shrunk: Shrunk | None = None
    minimal_control: list[str] | None = None
    replays: list[list[str]] = field(default_factory=list)
    witness: TrialResult | None = None
    search_seconds: float = 0.0
    shrink_seconds: float = 0.0
    total_seconds: float = 0.0
    corpus: int = 0
    best_near_miss: int = 0
    fast_seconds: list[float] = field(default_factory=list)  # every search-tier run (search and shrink)
    builds: dict[str, str] = field(default_factory=dict)  # scheduler -> its exact build, as the rig ran it
    findings: list[Finding] = field(default_factory=list)  # distinct confirmed bugs, first found first
    canaries: list[TrialResult] = field(default_factory=list)  # fault-free trials; one that broke is the rig's
    prechecked: int = 0  # genomes the pre-check redrew (no rule could fire on the workload)
    # The differential oracle: workloads it learned a clean end state of, and those whose clean runs were not clean.
    baselines: int = 0
    untrusted_baselines: int = 0
    tokens: int = 0  # distinct novelty tokens the search trials showed (per-pod fault sequences, phase events)
    novel: int = 0  # search trials that showed a token no earlier trial had
    dead_forms: list[str] = field(default_factory=list)  # rule forms the pre-check learned never inject
    known: dict[str, KnownTally] = field(default_factory=dict)  # known bugs hit, by id, first hit first
    spent: Spent = field(default_factory=Spent)
    phase: str = "searching"  # searching | shrinking | done | interrupted (what the report was written during)
    interrupted: str | None = None  # the signal that ended the search
    resumed: int = 0  # search steps served from an earlier run's trials.jsonl
    pids: dict[str, dict[str, int]] = field(default_factory=dict)  # scheduler -> component -> pid (process group)
    plan: dict[str, Any] | None = None  # a planned search's coverage (plans.PlanCoverage.as_dict)
    plan_error: str | None = None  # why a planned search made no plan (its reference run)

    @property
    def injected_nothing(self) -> int:
        """Search trials (canaries aside) whose profile injected nothing: no evidence either way."""
        return sum(1 for t in self.trials if t.injections == 0 and not t.error)

    def injected_nothing_share(self) -> float:
        """That, as a share of the search trials."""
        return self.injected_nothing / len(self.trials) if self.trials else 0.0

    def broken_canaries(self) -> list[TrialResult]:
        """Canaries that broke an invariant with no fault active: the rig's or the workload's problem."""
        return [c for c in self.canaries if c.broken]

    def precision(self) -> dict[str, Any]:
        """The precision figure: what became of the hits (excused by the ledger, the faults' effect as the control
        showed, not repeated, nothing injected, known, confirmed), and each distinct finding's replays."""
        by = {v: sum(1 for h in self.hits if h.verdict == v) for v in VERDICTS}
        return {"hits": len(self.hits), "excusedByLedger": by["excused"], "faultsEffect": by["control-broken"],
                "didNotRepeat": by["not-reproduced"], "noInjection": by["no-injection"], "known": by["known"],
                "confirmed": by["confirmed"], "unconfirmed": by["unconfirmed"], "findings": len(self.findings),
                "findingReplays": [{"reproduced": sum(1 for r in f.replays if set(f.target) <= set(r)),
                                    "of": len(f.replays)} for f in self.findings],
                "controlRunsPerHit": self.settings.controls if self.settings.control is not None else 0}

    @property
    def reproduced(self) -> int:
        """Replays of the minimal case that broke the target invariants."""
        return sum(1 for broken in self.replays if set(self.target) <= set(broken))

    def trial_seconds(self) -> list[float]:
        """Durations of the search-tier trials."""
        return [t.seconds for t in self.trials]

    def median_trial(self) -> float:
        """Median search-trial duration."""
        return statistics.median(self.trial_seconds()) if self.trials else 0.0

    def trials_per_hour(self) -> float:
        """Search trials per hour of trial time (each trial from its scheduler restart to its cleanup;
        control-plane starts and confirmation runs are not in it)."""
        total = sum(self.trial_seconds())
        return len(self.trials) * 3600 / total if total else 0.0
