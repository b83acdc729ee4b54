"""The search loop: random and mutated trials with novelty feedback, then confirmation (replay,
and the control scheduler under the same profile), shrinking, and the minimal case's replays."""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kube_fault_proxy.rig.search.genome import Genome, valid
from kube_fault_proxy.rig.search.grammar import mutate, random_genome, trial_rng
from kube_fault_proxy.rig.search.shrink import Shrunk, shrink
from kube_fault_proxy.rig.search.trial import CONFIRM, CONTROL, SEARCH, Rig, Tier, TrialResult, run_trial

FRESH_SHARE = 0.4  # share of trials drawn fresh once the corpus is not empty (the rest mutate it)


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
    max_trials: int | None = None
    # With scheduler yunikorn: v1.9.0 with this patch, or this shim checkout (build.yunikorn).
    yunikorn_patch: Path | None = None
    yunikorn_source: Path | None = None


@dataclass
class Hit:
    """A trial that broke invariants, and what confirming it showed."""

    trial: int
    genome: Genome
    broken: list[str]
    replay: list[str] | None = None
    control: list[str] | None = None
    verdict: str = "unconfirmed"  # confirmed | not-reproduced | control-broken (rig or workload)

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"trial": self.trial, "genome": self.genome.canonical(), "broken": self.broken, "replay": self.replay,
                "control": self.control, "verdict": self.verdict}


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


class Search:
    """One search run; the rigs are opened lazily and always closed."""

    def __init__(self, settings: Settings, note: Callable[[str], None],
                 progress: Callable[[Outcome], None] | None = None) -> None:
        self.s, self.note, self.progress = settings, note, progress
        self.fast_seconds: list[float] = []
        self.rigs: dict[str, Rig] = {}
        self._rigs = contextlib.ExitStack()  # every rig started, stopped together by close()
        self.builds: dict[str, str] = {}
        self.journal = settings.out / "trials.jsonl"

    def rig(self, scheduler: str) -> Rig:
        """The rig for a scheduler, started on first use."""
        if scheduler not in self.rigs:
            self.note(f"starting the control plane for {scheduler} ({self.s.nodes} nodes)")
            self.rigs[scheduler] = self._rigs.enter_context(Rig.running(
                self.s.state_dir / scheduler, scheduler, self.s.nodes, self.s.profiles_dir, self.s.yunikorn_patch,
                self.s.yunikorn_source))
            self.builds[scheduler] = self.rigs[scheduler].build
        return self.rigs[scheduler]

    def close(self) -> None:
        """Stop every rig."""
        self._rigs.close()
        self.rigs.clear()

    def trial(self, scheduler: str, genome: Genome, name: str, tier: Tier = SEARCH) -> TrialResult:
        """Run and record one trial."""
        result = run_trial(self.rig(scheduler), genome, name, tier, self.note)
        if tier is SEARCH:
            self.fast_seconds.append(result.seconds)
        with self.journal.open("a") as f:
            f.write(json.dumps({**result.as_dict(), "tier": tier.name}) + "\n")
        return result

    def genome(self, number: int, corpus: Sequence[Genome]) -> Genome:
        """Trial `number`'s genome: a function of (seed, number) and the corpus so far."""
        rng = trial_rng(self.s.seed, number)
        if corpus and rng.random() >= FRESH_SHARE:
            parent, other = rng.choice(list(corpus)), rng.choice(list(corpus))
            g = mutate(rng, parent, self.s.kinds, other)
        else:
            g = random_genome(rng, self.s.kinds, self.s.pods)
        if not valid(g):  # never expected: the grammar only builds loader-valid rules
            raise AssertionError(f"the grammar built an invalid profile: {g.canonical()}")
        return g

    def run(self) -> Outcome:
        """Search until a confirmed hit or the budget; then shrink and replay it."""
        s, out = self.s, Outcome(self.s)
        s.out.mkdir(parents=True, exist_ok=True)
        self.journal.write_text("")
        t_start = time.monotonic()
        corpus: list[Genome] = []
        seen: set[str] = set()
        try:
            number = 0
            while time.monotonic() - t_start < s.budget and (s.max_trials is None or number < s.max_trials):
                g = self.genome(number, corpus)
                result = self.trial(s.scheduler, g, f"t{number}")
                out.trials.append(result)
                new = result.tokens - seen
                seen |= result.tokens
                if (new or result.near_miss > out.best_near_miss) and not result.error:
                    corpus.append(g)
                out.best_near_miss = max(out.best_near_miss, result.near_miss)
                out.corpus = len(corpus)
                if self.progress is not None:
                    self.progress(out)
                if result.hit and not result.error:
                    hit = self.confirm(number, g, result)
                    out.hits.append(hit)
                    if hit.verdict == "confirmed":
                        out.confirmed = hit
                        break
                number += 1
            out.search_seconds = time.monotonic() - t_start
            if out.confirmed is not None:
                self.minimise(out)
        finally:
            self.close()
        out.total_seconds = time.monotonic() - t_start
        out.fast_seconds = self.fast_seconds
        out.builds = dict(self.builds)
        return out

    def confirm(self, number: int, g: Genome, first: TrialResult) -> Hit:
        """Replay the same profile and seed (patiently), then run the control scheduler under it."""
        hit = Hit(number, g, first.broken)
        self.note(f"hit at trial {number}: {', '.join(first.broken)}; replaying it")
        replay = self.trial(self.s.scheduler, g, f"t{number}-replay", CONFIRM)
        hit.replay = replay.broken
        if not set(first.broken) & set(replay.broken):
            hit.verdict = "not-reproduced"
            return hit
        if self.s.control is not None:
            control = self.trial(self.s.control, g, f"t{number}-control", CONTROL)
            hit.control = control.broken if not control.error else [f"error: {control.error}"]
            if hit.control:
                hit.verdict = "control-broken"
                self.note(f"  the control ({self.s.control}) broke too: the rig's or the workload's fault")
                return hit
        hit.verdict = "confirmed"
        self.note(f"  confirmed: {', '.join(sorted(set(first.broken) & set(replay.broken)))}")
        return hit

    def minimise(self, out: Outcome) -> None:
        """Shrink the confirmed hit keeping its invariants broken, then replay the minimal case."""
        assert out.confirmed is not None and out.confirmed.replay is not None
        out.target = sorted(set(out.confirmed.broken) & set(out.confirmed.replay))
        target = set(out.target)
        count = 0

        def still_fails(cand: Genome) -> tuple[bool, list[list[str]]]:
            nonlocal count
            runs: list[list[str]] = []
            for _ in range(2):  # a candidate that passes twice is rejected ("unresolved" in ddmin)
                count += 1
                r = self.trial(self.s.scheduler, cand, f"shrink{count}")
                runs.append(r.broken)
                if target <= set(r.broken):
                    return True, runs
            return False, runs

        t0 = time.monotonic()
        self.note(f"shrinking (keeping {', '.join(out.target)} broken; budget {self.s.shrink_budget:.0f}s)")
        out.shrunk = shrink(out.confirmed.genome.with_(origin="confirmed"), still_fails, self.s.shrink_budget)
        out.shrink_seconds = time.monotonic() - t0
        minimal = out.shrunk.genome
        self.note(f"minimal: {len(minimal.rules)} rules, {minimal.pods} pods, {minimal.nodes or self.s.nodes} nodes; "
                  f"replaying it {self.s.replays} times")
        for k in range(self.s.replays):
            r = self.trial(self.s.scheduler, minimal, f"minimal-{k + 1}", CONFIRM)
            out.replays.append(r.broken)
            if out.witness is None and target <= set(r.broken):
                out.witness = r
        if self.s.control is not None:
            c = self.trial(self.s.control, minimal, "minimal-control", CONTROL)
            out.minimal_control = c.broken if not c.error else [f"error: {c.error}"]
