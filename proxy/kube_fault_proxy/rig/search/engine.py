"""The search loop: random and mutated trials with novelty feedback and fault-free canaries, each hit
confirmed (replay, then the control: another scheduler under the same profile, the same scheduler
without it, or the same build with other feature gates under it); every confirmed hit filed by
signature until the budget ends; each distinct finding shrunk and its minimal case replayed."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from kube_fault_proxy.rig.cluster.control_plane import down
from kube_fault_proxy.rig.cluster.processes import live_groups
from kube_fault_proxy.rig.cluster.record import Cluster, ClusterError
from kube_fault_proxy.rig.search import control as controls
from kube_fault_proxy.rig.search import differential, planned, precheck, resume, waist
from kube_fault_proxy.rig.search import known as known_findings
from kube_fault_proxy.rig.search.findings import Finding, add_hit, contained_in, merge, shrink_order
from kube_fault_proxy.rig.search.genome import Genome, valid
from kube_fault_proxy.rig.search.grammar import mutate, random_genome, trial_rng
from kube_fault_proxy.rig.search.hit import Hit
from kube_fault_proxy.rig.search.interrupt import Interrupted, SignalGuard
from kube_fault_proxy.rig.search.outcome import (
    UNFAULTED,
    KnownTally,
    Outcome,
    Settings,
    kept_by_control,
    same_judge,
)
from kube_fault_proxy.rig.search.shrink import shrink
from kube_fault_proxy.rig.search.trial import (
    CANARY,
    CONTROL,
    SEARCH,
    Rig,
    Tier,
    TrialResult,
    confirm_tier,
    run_trial,
)
from kube_fault_proxy.rig.workloads.shapes import DEVICE_SHAPES, GANG_SHAPES

FRESH_SHARE = 0.4  # share of trials drawn fresh once the corpus is not empty (the rest mutate it)
PRECHECK_ATTEMPTS = 30  # draws per trial before a genome the pre-check calls wasted is run anyway


class Search:
    """One search run; the rigs are opened lazily and always closed, on a signal too (interrupt.py)."""

    def __init__(self, settings: Settings, note: Callable[[str], None],
                 progress: Callable[[Outcome], None] | None = None,
                 checkpoint: Callable[[Outcome], object] | None = None) -> None:
        self.s, self.note, self.progress, self.checkpoint = settings, note, progress, checkpoint
        self.fast_seconds: list[float] = []
        self.rigs: dict[str, Rig] = {}
        self._rigs = contextlib.ExitStack()  # every rig started, stopped together by close()
        self._own: dict[str, contextlib.ExitStack] = {}  # each rig's own, to stop one before the others
        self.builds: dict[str, str] = {}
        self.journal = settings.out / "trials.jsonl"
        self.ran: dict[str, int] = {}  # rule form -> trials it was in; fired: those where it injected
        self.fired: dict[str, int] = {}
        self.prechecked = 0
        self.records = resume.Records([])
        every = known_findings.catalogue(settings.known_files)
        self.catalogue = every.model_copy(update={"known": [k for k in every.known
                                                            if k.id not in settings.known_as_new]})
        self.labels = every  # what a finding is labelled by (--include-known keeps the label, not the shortcut)
        self.interrupted = False
        self.step = "t"  # what a search step's trials are named by: t12 (a planned search's: p12)
        self.step_seconds = 0.0  # trial seconds of the search step under way (its trial, replay and control)
        self.t_start = time.monotonic()
        self.pids: dict[str, dict[str, int]] = {}
        self.waist = waist.of(settings.scheduler, settings.shapes)  # where the grammar draws the target's rules
        # The differential oracle's clean end states, per rig and workload (None: its clean runs did not agree to
        # be clean: a run broke an invariant or failed, so no baseline is trusted for that workload).
        self.baselines: dict[str, differential.Baseline | None] = {}

    def scheduler_of(self, key: str) -> str:
        """The scheduler a rig runs: a scheduler's name is its own rig, a `gates:` or `build:` control the target's."""
        return self.s.scheduler if controls.is_gates(key) or controls.is_build(key) else key

    def gates_of(self, key: str) -> dict[str, dict[str, bool]]:
        """The feature gates a rig runs with: the target's, with a `gates:` control's changes over them."""
        if controls.is_gates(key):
            return controls.merged(self.s.feature_gates, controls.parse(key, self.s.scheduler))
        return self.s.feature_gates

    def state_dir_of(self, key: str) -> Path:
        """Where a rig's control plane lives: one directory per scheduler, one for a control by gates."""
        return self.s.state_dir / (controls.state_name(key) if controls.is_gates(key) or controls.is_build(key)
                                   else key)

    def rig(self, key: str) -> Rig:
        """The rig for a scheduler (or a control by gates), started on first use."""
        if key not in self.rigs:
            self.stop_other_yunikorn(key)
            left = self.state_dir_of(key)
            if Cluster(left).processes:  # an earlier run's, killed (kill -9) before it could stop them
                stopped = down(left)
                self.note(f"stopped what an earlier search left running in {left}: {', '.join(stopped.names)}")
            self.note(f"starting the control plane for {key} ({self.s.nodes} nodes)")
            patch, source, kube = self.s.yunikorn_patch, self.s.yunikorn_source, self.s.kube_scheduler_patch
            if controls.is_build(key):  # the target scheduler as released (build:released), or with a patch of its own
                patch, source, kube = controls.build_patch(key), None, controls.build_patch(key)
            own = self._own[key] = self._rigs.enter_context(contextlib.ExitStack())
            self.rigs[key] = own.enter_context(Rig.running(
                left, self.scheduler_of(key), self.s.nodes, self.s.profiles_dir, patch, source,
                self.gates_of(key), self.s.workloads, self.s.kubernetes,
                devices=bool(set(self.s.shapes) & set(DEVICE_SHAPES)),
                gangs=bool(set(self.s.shapes) & set(GANG_SHAPES)), kube_scheduler_patch=kube))
            self.builds[key] = self.rigs[key].build
        self.remember_pids(key, self.rigs[key])
        return self.rigs[key]

    def stop_other_yunikorn(self, key: str) -> None:
        """YuniKorn's REST port is fixed (9080): before a YuniKorn rig starts, stop any other (a patched target and
        its `build:released` or `build:patch=FILE` control take turns)."""
        if self.scheduler_of(key) != "yunikorn":
            return
        for other in [k for k in self.rigs if k != key and self.scheduler_of(k) == "yunikorn"]:
            self.note(f"stopping the control plane for {other}: one YuniKorn at a time (its REST port is fixed)")
            del self.rigs[other]
            self._own.pop(other).close()

    def remember_pids(self, key: str, rig: Rig) -> None:
        """Add what a rig's control plane runs now to what the search recorded of it: a process stopped since
        (a scheduler restarted, or caught between its stop and its start by a signal) keeps its last pid, so
        the record names every process group the search started, and each can be checked gone."""
        running = {n: p.pid for n, p in rig.cluster.processes.items()}
        self.pids[key] = {**self.pids.get(key, {}), **running}

    def state_dirs(self) -> list[Path]:
        """Where every control plane this search may start keeps its state (and its processes' pids)."""
        return [self.state_dir_of(k) for k in dict.fromkeys([self.s.scheduler, self.s.control or ""])
                if k and k != UNFAULTED]

    def kill_now(self) -> None:
        """SIGKILL every process group any control plane of this search recorded (a second signal's answer)."""
        for d in self.state_dirs():
            with contextlib.suppress(OSError, ClusterError):  # a state file half written or not a cluster's
                for p in Cluster(d).processes.values():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(p.pid, signal.SIGKILL)

    def close(self) -> None:
        """Stop every rig (after a signal, with a shorter grace: SIGKILL 3 s after SIGTERM)."""
        if self.interrupted:
            for rig in self.rigs.values():
                down(rig.cluster.dir, grace=3.0)
        self._rigs.close()
        self.rigs.clear()
        for d in self.state_dirs():  # a control plane a signal caught between its start and its rig: stop it too
            procs = Cluster(d).processes
            if live_groups({p.pid for p in procs.values()}):
                down(d, grace=3.0)

    def trial(self, scheduler: str, genome: Genome, name: str, tier: Tier = SEARCH) -> TrialResult:
        """Run and record one trial on a scheduler's rig, or a control's by gates (or take an earlier run's record
        of it, when resuming)."""
        recorded = self.records.take(name, self.scheduler_of(scheduler), genome)
        if recorded is not None:
            result, build = recorded
            if build is not None:
                self.builds.setdefault(scheduler, build)
        else:
            rig = self.rig(scheduler)
            try:
                result = run_trial(rig, genome, name, tier, self.note)
            finally:  # the trial restarted the scheduler: its new pid too
                self.remember_pids(scheduler, rig)
            if self.s.differential and tier is not CANARY and not result.error and result.end_state:
                self.differ(scheduler, genome, result)
            with self.journal.open("a") as f:
                f.write(json.dumps({**result.as_dict(), "tier": tier.name, "searchSeed": self.s.seed,
                                    "build": self.builds.get(scheduler)}) + "\n")
        if tier is SEARCH:
            self.fast_seconds.append(result.seconds)
        self.step_seconds += result.seconds
        return result

    def baseline(self, scheduler: str, genome: Genome) -> differential.Baseline | None:
        """The clean end state of a genome's workload (its pods, nodes, shape and action; not its seed) on a rig:
        learned from `differential` fault-free runs of it, each under a seed of its own, the first time it is asked
        for (named `b<key>-<k>`, so a resumed search takes them from its journal)."""
        g = genome.with_(rules=(), origin="baseline")
        key = f"{scheduler} pods={g.pods} nodes={g.nodes} shape={g.shape} action={g.action}" + (
            f" churn={json.dumps(list(g.churn), sort_keys=True)}" if g.churn else "")
        if key not in self.baselines:
            tag = hashlib.sha256(key.encode()).hexdigest()[:8]
            # Each clean run under a seed of its own: a shape's pods are a function of the seed too, so what varies
            # with it (which pods are large, which go to the tainted pool) is masked, not judged.
            seeds = [int(hashlib.sha256(f"{key}:{k}".encode()).hexdigest()[:8], 16) for k in range(self.s.differential)]
            runs = [self.trial(scheduler, g.with_(seed=seed), f"b{tag}-{k + 1}", CANARY)
                    for k, seed in enumerate(seeds)]
            unclean = [f"{r.name}: {r.error or ', '.join(r.broken)}" for r in runs if r.error or r.broken]
            if unclean:
                self.note(f"  no differential baseline for this workload: its clean runs were not clean "
                          f"({'; '.join(unclean)})")
                self.baselines[key] = None
            else:
                self.baselines[key] = differential.Baseline.learn([r.end_state for r in runs])
        return self.baselines[key]

    def differ(self, scheduler: str, genome: Genome, result: TrialResult) -> None:
        """Compare a trial's end state with its workload's clean runs. A trial that broke no invariant but ended
        where no clean run did breaks `diverged` (differential.DIVERGED); one that broke an invariant keeps the
        divergences as evidence only."""
        base = self.baseline(scheduler, genome)
        if base is None:
            return
        result.diverged = [str(d) for d in base.diverged(result.end_state)]
        if result.diverged and not result.broken:
            result.broken = [differential.DIVERGED]
            self.note(f"  {result.name}: ended where no clean run did: {'; '.join(result.diverged[:3])}"
                      + (f" and {len(result.diverged) - 3} more" if len(result.diverged) > 3 else ""))

    def elapsed(self) -> float:
        """The search's time: this run's, and the trial seconds of what an earlier run recorded and this one took."""
        return time.monotonic() - self.t_start + self.records.seconds

    def genome(self, number: int, corpus: Sequence[Genome]) -> Genome:
        """Trial `number`'s genome: a function of (seed, number), the corpus and the forms learned dead so far;
        redrawn while the pre-check says no rule of it can fire on the workload."""
        dead = precheck.dead_forms(self.ran, self.fired)
        for attempt in range(PRECHECK_ATTEMPTS):
            rng = trial_rng(self.s.seed, number) if attempt == 0 else random.Random(
                f"kfp-search:{self.s.seed}:{number}:{attempt}")
            if corpus and rng.random() >= FRESH_SHARE:
                parent, other = rng.choice(list(corpus)), rng.choice(list(corpus))
                g = mutate(rng, parent, self.s.kinds, other, self.s.shapes, self.waist, self.s.actions)
            else:
                g = random_genome(rng, self.s.kinds, self.s.pods, self.s.shapes, self.waist, self.s.actions)
            if not valid(g):  # never expected: the grammar only builds loader-valid rules
                raise AssertionError(f"the grammar built an invalid profile: {g.canonical()}")
            if precheck.can_inject(g, dead, self.s.scheduler):
                break
            self.prechecked += 1
        return g

    def trial_number(self, drawn: int) -> int:
        """The number a search step is known by (its name, its hit) for the step drawn as `drawn` from the seed: the
        same here; a campaign's coordinator numbers each worker's steps apart (campaign.py)."""
        return drawn

    def learn(self, g: Genome, result: TrialResult) -> None:
        """Which rule forms ran and which injected (the pre-check's learned dead forms)."""
        if result.error:
            return
        for r in g.rules:
            f = precheck.form(r)
            self.ran[f] = self.ran.get(f, 0) + 1
            if r["name"] in result.fired:
                self.fired[f] = self.fired.get(f, 0) + 1

    def canary(self, number: int, out: Outcome) -> None:
        """A fault-free trial of a drawn workload: what breaks here is the rig's or the workload's, never a finding."""
        g = random_genome(trial_rng(self.s.seed, number), self.s.kinds, self.s.pods, self.s.shapes, self.waist,
                          self.s.actions)  # its trial actions kept: node churn with no fault is judged too
        result = self.trial(self.s.scheduler, g.with_(rules=(), action=None, origin="canary"),
                            f"c{self.trial_number(number)}", CANARY)
        out.canaries.append(result)
        if result.broken:
            self.note(f"  canary {result.name} ({g.shape}, no fault) broke {', '.join(result.broken)}: the rig's or "
                      "the workload's problem, not a finding")

    def run(self) -> Outcome:
        """Search until the budget ends, filing every confirmed hit; then shrink and replay each distinct one. A
        signal ends it early; the report is written as findings are confirmed and once more at the end."""
        s, out = self.s, Outcome(self.s)
        s.out.mkdir(parents=True, exist_ok=True)
        self.records = resume.open_journal(self.journal, s.seed, s.scheduler, s.fresh, self.note)
        self.t_start = time.monotonic()
        guard = SignalGuard(self.kill_now, self.note)
        with guard.installed():
            try:
                try:
                    if s.plan:
                        planned.run(self, out)
                    else:
                        self.search(out)
                    out.phase = "shrinking"
                    self.shrink_all(out)
                    out.phase = "done"
                except Interrupted as e:
                    self.interrupted = True
                    out.interrupted, out.phase = e.name, "interrupted"
                    self.note(f"stopping: {e.name}")
            finally:
                with guard.teardown():
                    self.close()
            with guard.teardown():
                self.snapshot(out)
                out.total_seconds = self.elapsed()
                if self.checkpoint is not None:
                    self.checkpoint(out)
        return out

    def snapshot(self, out: Outcome) -> None:
        """What the outcome cannot keep up to date itself, for a report written now."""
        out.fast_seconds, out.builds, out.prechecked = list(self.fast_seconds), dict(self.builds), self.prechecked
        out.baselines = sum(1 for b in self.baselines.values() if b is not None)
        out.untrusted_baselines = len(self.baselines) - out.baselines
        out.dead_forms = sorted(precheck.dead_forms(self.ran, self.fired))
        out.resumed, out.pids = self.records.served, {k: dict(v) for k, v in self.pids.items()}
        if out.phase == "searching" or (out.phase == "interrupted" and not out.search_seconds):
            out.search_seconds = self.elapsed()
        if out.phase != "done" and out.findings:  # before the shrink phase is over: the first finding, unshrunk
            first = out.findings[0]
            out.confirmed, out.target, out.shrunk = first.first, first.target, first.shrunk
            out.replays, out.minimal_control, out.witness = first.replays, first.minimal_control, first.witness

    def save(self, out: Outcome) -> None:
        """Write the report now (a confirmed finding or a known hit), so a killed search leaves it."""
        if self.checkpoint is not None:
            self.snapshot(out)
            self.checkpoint(out)

    def search(self, out: Outcome) -> None:
        """The search phase: trials until the budget (or the trial cap) ends."""
        s = self.s
        corpus: list[Genome] = []
        seen: set[str] = set()
        number = 0
        while self.elapsed() < s.budget and (s.max_trials is None or number < s.max_trials):
            self.step_seconds = 0.0
            if s.canary_every and number % s.canary_every == s.canary_every - 1:
                self.canary(number, out)
                out.spent.add(None, self.step_seconds)
                number += 1
                continue
            g = self.genome(number, corpus)
            result = self.trial(s.scheduler, g, f"t{self.trial_number(number)}")
            out.trials.append(result)
            self.learn(g, result)
            new = result.tokens - seen
            seen |= result.tokens
            out.tokens, out.novel = len(seen), out.novel + bool(new)
            if (new or result.near_miss > out.best_near_miss) and not result.error and result.injections:
                corpus.append(g)  # a trial that injected nothing is no evidence, novel or clean
            out.best_near_miss = max(out.best_near_miss, result.near_miss)
            out.corpus = len(corpus)
            if self.progress is not None:
                self.progress(out)
            hit = result.hit and not result.error
            verdict = self.file_hit(self.trial_number(number), g, result, out) if hit else None
            out.spent.add(verdict, self.step_seconds)
            number += 1
        out.search_seconds = self.elapsed()
        out.prechecked = self.prechecked
        out.dead_forms = sorted(precheck.dead_forms(self.ran, self.fired))

    def file_hit(self, number: int, g: Genome, result: TrialResult, out: Outcome) -> str:
        """Classify a trial that broke something: nothing injected, the faults' own effect, a known bug (confirmed
        once, then only counted), or a hit to confirm and file as a finding; returns the verdict."""
        s = self.s
        if result.injections == 0:
            out.hits.append(Hit(number, g, result.broken, verdict="no-injection"))
            self.note(f"  {self.step}{number} broke {', '.join(result.broken)} with nothing injected: "
                      "the rig's or the workload's problem, not a finding")
            return "no-injection"
        if result.own_effect and not s.include_known:
            out.hits.append(Hit(number, g, result.broken, verdict="excused", known=result.own_effect))
            self.note(f"  {self.step}{number} broke {', '.join(result.broken)}: excused by the ledger, the fault's own "
                      f"effect ({result.own_effect})")
            return "excused"
        build = self.builds.get(s.scheduler)
        entry = None if s.include_known else self.catalogue.match(result.broken, g, s.scheduler, build)
        tally = out.known.get(entry.id) if entry is not None else None
        if entry is not None and tally is not None and tally.confirmed_at is not None:
            hit = Hit(number, g, result.broken, verdict="known", known=entry.id)
            self.note(f"  {self.step}{number}: known: {entry.id} again ({len(tally.trials) + 1} hits); not replayed")
        else:
            hit = self.confirm(number, g, result)
            hit.ledger = result.check.get("ledger")
            # what the control broke too is not the hit's: neither run's face of a known bug may rest on it
            entry = None if s.include_known or hit.verdict != "confirmed" else self.catalogue.match_confirmed(
                hit.target, [b for b in result.broken if b not in hit.shared],
                None if hit.replay is None else [b for b in hit.replay if b not in hit.shared], g, s.scheduler, build)
            if entry is not None and self.control_lacks(entry, hit):
                self.note(f"  not {entry.id}: the control ({s.control}) has it too, and kept "
                          f"{', '.join(entry.signature.breaks)} under the same profile")
                entry = None
            if entry is not None:
                hit.verdict, hit.known = "known", entry.id
                tally = out.known.setdefault(entry.id, KnownTally(entry))
                if tally.confirmed_at is None:  # a later hit that needed its replay to be known is not the first
                    tally.confirmed_at = number
                    self.note(f"  known: {entry.id} ({entry.upstream}); its hits are counted from now on, not shrunk")
                else:
                    self.note(f"  known: {entry.id} again, by its replay ({len(tally.trials) + 1} hits)")
            elif hit.verdict == "confirmed":
                add_hit(out.findings, hit)
        out.hits.append(hit)
        if hit.verdict == "known" and hit.known is not None:
            out.known[hit.known].trials.append(number)
        if hit.verdict in ("known", "confirmed"):
            self.save(out)
        return hit.verdict

    def shrink_all(self, out: Outcome) -> None:
        """The shrink phase: each distinct finding shrunk (within the total budget) and its minimal case replayed."""
        s = self.s
        t0 = time.monotonic()
        done: list[Finding] = []
        for f in shrink_order(out.findings):
            if (home := contained_in(f, done)) is not None:
                home.hits += f.hits
                home.contained += len(f.hits)
                out.findings.remove(f)
                continue
            if s.shrink_total is not None and time.monotonic() - t0 >= s.shrink_total:
                self.note(f"not shrinking trial {f.first.trial}'s hit ({', '.join(f.target)}): the total shrink "
                          f"budget ({s.shrink_total:.0f}s) is spent")
                continue
            self.minimise(f)
            done.append(f)
            out.shrink_seconds = time.monotonic() - t0
            self.save(out)
        out.findings = merge(sorted(out.findings, key=lambda f: f.shrunk is None))
        out.shrink_seconds = time.monotonic() - t0
        for f in out.findings:  # a known bug searched as new ground (--include-known) keeps its name
            entry = self.labels.match(f.target, f.minimal, s.scheduler, self.builds.get(s.scheduler))
            f.known = entry.id if entry is not None else None
        if out.findings:
            first = out.findings[0]
            out.confirmed, out.target, out.shrunk = first.first, first.target, first.shrunk
            out.replays, out.minimal_control, out.witness = first.replays, first.minimal_control, first.witness

    def confirm(self, number: int, g: Genome, first: TrialResult) -> Hit:
        """Replay the same profile and seed (patiently), then run the control scheduler under it."""
        hit = Hit(number, g, first.broken)
        self.note(f"hit at trial {number}: {', '.join(first.broken)}; replaying it")
        replay = self.trial(self.s.scheduler, g, f"{self.step}{number}-replay", self.confirm_tier)
        hit.replay = replay.broken
        if not set(first.broken) & set(replay.broken) or replay.own_effect:
            hit.verdict = "not-reproduced"  # a replay the ledger wholly excuses repeated only the fault's effect
            return hit
        hit.control = self.control_run(g, f"{self.step}{number}-control", hit.target)
        kept = kept_by_control(hit.control, hit.target, self.same_judge)
        if not kept:
            hit.verdict = "control-broken"
            why = ("the faults' effect, or a bug the control has too" if self.same_judge
                   else "the rig's or the workload's fault")
            self.note(f"  the control ({self.s.control}) broke {', '.join(hit.control or [])} too: {why}")
            return hit
        hit.shared = sorted(set(hit.target) - set(kept))
        hit.verdict = "confirmed"
        self.note(f"  confirmed: {', '.join(hit.target)}")
        if hit.shared:
            self.note(f"  the control ({self.s.control}) broke {', '.join(hit.shared)} too: the faults' effect, "
                      "left out of the hit")
        if own := sorted(set(hit.control or []) - set(hit.broken)):  # the control scheduler's own, reported apart
            self.note(f"  the control ({self.s.control}) broke {', '.join(own)}, none of the hit's: "
                      "the control's own violation, reported apart")
        return hit

    def control_lacks(self, entry: known_findings.KnownFinding, hit: Hit) -> bool:
        """Whether a control by build has a known bug (its build is in the bug's range) and yet kept what the bug
        breaks under the hit's profile, every run: then the target broke it by its own change, not by that bug (a
        planted 409 taken as bound books a phantom as YUNIKORN-3355 does, where the release shows 3128 instead).
        Its one caller matches the catalogue on what the target broke less what the control broke too, so the
        second clause holds whenever the label matched; it keeps the rule right if that caller changes."""
        build = self.builds.get(self.s.control or "")
        return controls.is_build(self.s.control) and build is not None and \
            entry.applies_to(self.s.scheduler, build) and not set(entry.signature.breaks) & set(hit.control or [])

    @property
    def same_judge(self) -> bool:
        """Whether the control is judged by the target's invariants: the target scheduler as another build, with
        other gates, or without the fault; not a scheduler named as the control (judged by its own invariants)."""
        return same_judge(self.s.control)

    @property
    def confirm_tier(self) -> Tier:
        """The replays' tier for the scheduler under test (trial.confirm_tier)."""
        return confirm_tier(self.s.scheduler)

    def control_run(self, g: Genome, name: str, target: Sequence[str] = ()) -> list[str] | None:
        """The control under the genome, `controls` times (named `name`, `name-2`, ...): another scheduler under the
        same profile, the same build with other gates under it (`gates:`), or (UNFAULTED) the same scheduler and
        workload without it; what any of the runs broke (None when no control is set). It stops at the first run
        that fails or breaks one of `target`: the hit is the faults' or the workload's then, whatever the rest do."""
        if self.s.control is None:
            return None
        broken: list[str] = []
        # The same scheduler is controlled at its replay's tier, so both are judged alike (YuniKorn never retries a
        # Binding: 8 s of quiet); another scheduler at the control's 25 s, longer than kube-scheduler's bind retry.
        tier = self.confirm_tier if self.same_judge else CONTROL
        for k in range(self.s.controls):
            run = name if k == 0 else f"{name}-{k + 1}"
            if self.s.control == UNFAULTED:
                r = self.trial(self.s.scheduler, g.with_(rules=(), origin="control"), run, tier)
            else:
                r = self.trial(self.s.control, g, run, tier)
            if r.error:
                return [f"error: {r.error}"]
            broken += [b for b in r.broken if b not in broken]
            if not kept_by_control(broken, list(target), self.same_judge):
                break
        return broken

    def minimise(self, found: Finding) -> None:
        """Shrink a finding's first hit keeping its invariants broken, then replay the minimal case."""
        target = set(found.target)
        count = 0
        tag = f"-t{found.first.trial}"  # one finding's trials apart from another's

        def still_fails(cand: Genome) -> tuple[bool, list[list[str]]]:
            nonlocal count
            runs: list[list[str]] = []
            for _ in range(2):  # a candidate that passes twice is rejected ("unresolved" in ddmin)
                count += 1
                r = self.trial(self.s.scheduler, cand, f"shrink{tag}-{count}")
                runs.append(r.broken)
                if target <= set(r.broken) and not r.own_effect:  # a wholly excused break is the fault's effect
                    return True, runs
            return False, runs

        t0 = time.monotonic()
        self.note(f"shrinking trial {found.first.trial}'s hit (keeping {', '.join(found.target)} broken; "
                  f"budget {self.s.shrink_budget:.0f}s)")
        found.shrunk = shrink(found.first.genome.with_(origin="confirmed"), still_fails, self.s.shrink_budget,
                              node_sizes=() if self.s.scheduler == waist.CONTROLLER_MANAGER else (5, 2, 1))
        found.shrink_seconds = time.monotonic() - t0
        minimal = found.shrunk.genome
        self.note(f"minimal: {len(minimal.rules)} rules, {minimal.pods} pods, {minimal.nodes or self.s.nodes} nodes, "
                  f"{minimal.shape}; replaying it {self.s.replays} times")
        for k in range(self.s.replays):
            r = self.trial(self.s.scheduler, minimal, f"minimal{tag}-{k + 1}", self.confirm_tier)
            found.replays.append(r.broken)
            if found.witness is None and target <= set(r.broken):
                found.witness = r
        found.minimal_control = self.control_run(minimal, f"minimal{tag}-control", found.target)
