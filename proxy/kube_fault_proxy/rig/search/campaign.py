"""A search campaign's two sides: the worker (one completion index of the Job: the search phase only, on the control
plane inside its pod, each trial's record said in its log) and the coordinator (the workers' records served back in
place of running them, every hit confirmed, grouped, shrunk and reported as a local search does, with where each
trial ran). Worker i searches with seed base + i; its step j is known to the coordinator as trial j * N + i."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kube_fault_proxy.rig.search import resume, worker_log
from kube_fault_proxy.rig.search.engine import Search
from kube_fault_proxy.rig.search.genome import Genome
from kube_fault_proxy.rig.search.job_manifest import Campaign, worker_seed
from kube_fault_proxy.rig.search.outcome import Outcome, Settings
from kube_fault_proxy.rig.search.trial import SEARCH, Tier, TrialResult
from kube_fault_proxy.rig.search.worker_log import Attempt, chosen, done_line, record_lines


class WorkerSearch(Search):
    """One worker: trials until its budget ends, no confirmation (its hits are the coordinator's), every record
    emitted as log lines the moment trials.jsonl has it."""

    def __init__(self, settings: Settings, index: int, pod: str | None, node: str | None,
                 note: Callable[[str], None], emit: Callable[[str], None]) -> None:
        super().__init__(settings, note)
        self.index, self.pod, self.node, self.emit, self.seq = index, pod, node, emit, 0

    def trial(self, scheduler: str, genome: Genome, name: str, tier: Tier = SEARCH) -> TrialResult:
        """Run the trial (Search.trial records it), then say its record."""
        before = self.journal.stat().st_size if self.journal.exists() else 0
        result = super().trial(scheduler, genome, name, tier)
        with self.journal.open() as f:
            f.seek(before)
            for line in f.read().splitlines():
                record = {**json.loads(line), "worker": {"index": self.index, "pod": self.pod, "node": self.node}}
                for text in record_lines(self.seq, record):
                    self.emit(text)
                self.seq += 1
        return result

    def file_hit(self, number: int, g: Genome, result: TrialResult, out: Outcome) -> str:
        """A hit is only noted: the coordinator replays it and runs the control."""
        self.note(f"  t{number} broke {', '.join(result.broken)}: for the coordinator to confirm")
        return "for-the-coordinator"

    def closing(self, out: Outcome) -> str:
        """The log's last line."""
        return done_line({"index": self.index, "seed": self.s.seed, "pod": self.pod, "node": self.node,
                          "steps": len(out.trials) + len(out.canaries), "searchSeconds": round(out.search_seconds, 1),
                          "build": out.builds.get(self.s.scheduler)})


def earlier_records(text: str, seed: int, scheduler: str) -> list[dict[str, Any]]:
    """From an index's records as the coordinator kept them (log lines of its earlier attempts), the search steps
    a retried worker resumes from: its own seed's and target's, from step 0 on, up to the first gap."""
    by_name = {str(r.get("name")): r for r in worker_log.parse(text).records
               if r.get("searchSeed") == seed and r.get("scheduler") == scheduler
               and resume.search_step(str(r.get("name")))}
    by_step = {int(name[1:]): r for name, r in by_name.items()}
    steps: list[dict[str, Any]] = []
    while len(steps) in by_step:
        steps.append(by_step[len(steps)])
    return steps


def resume_worker(records: list[dict[str, Any]], journal: Path, emit: Callable[[str], None]) -> int:
    """Start a retried worker where its index got to: the records go into its trials.jsonl (the search then
    serves them instead of running them, resume.py) and into its log again, as they were (each still naming the pod
    that ran it), so this attempt's log alone holds the index's whole search. The next record's sequence number."""
    journal.parent.mkdir(parents=True, exist_ok=True)
    journal.write_text("".join(json.dumps(r) + "\n" for r in records))
    for seq, r in enumerate(records):
        for text in record_lines(seq, r):
            emit(text)
    return len(records)


def global_number(index: int, local: int, workers: int) -> int:
    """The coordinator's number for worker `index`'s step `local`."""
    return local * workers + index


@dataclass
class WorkerRecords:
    """One index's records, as the coordinator serves them: renamed to global trial numbers, tagged with the pod."""

    index: int
    seed: int
    attempt: Attempt
    lines: list[dict[str, Any]]
    steps: int  # search steps from 0 on with no gap: the ones the coordinator serves

    @classmethod
    def of(cls, attempt: Attempt, base_seed: int, workers: int) -> WorkerRecords:
        """Take an attempt's records (search steps only, in order, up to the first gap)."""
        lines, by_local = [], {}
        for r in attempt.log.records:
            name = str(r.get("name", ""))
            if not resume.search_step(name):
                continue
            by_local[int(name[1:])] = r
        steps = 0
        while steps in by_local:
            r = by_local[steps]
            ran = r.get("worker") or {}  # a retried worker's resumed records name the earlier pod that ran them
            where = {"index": attempt.index, "pod": ran.get("pod", attempt.pod), "node": ran.get("node", attempt.node),
                     "step": steps}
            lines.append({**r, "name": f"{r['name'][0]}{global_number(attempt.index, steps, workers)}",
                          "worker": where})
            steps += 1
        return cls(attempt.index, worker_seed(base_seed, attempt.index), attempt, lines, steps)


def worker_records(attempts: list[Attempt], base_seed: int, workers: int) -> list[WorkerRecords]:
    """Every index's records, each from the attempt chosen for it (worker_log.chosen)."""
    return [WorkerRecords.of(a, base_seed, workers) for a in chosen(attempts).values()]


class EndOfIndex(Exception):
    """No further record of this index will come: its worker's search ends here."""


def _steps(a: Attempt) -> list[dict[str, Any]]:
    """An attempt's search steps from 0 on, up to the first gap."""
    by_local = {int(str(r["name"])[1:]): r for r in a.log.records if resume.search_step(str(r.get("name", "")))}
    steps: list[dict[str, Any]] = []
    while len(steps) in by_local:
        steps.append(by_local[len(steps)])
    return steps


class Feed:
    """The workers' records as they arrive, for the coordinator to take step by step while the Job runs. Index i's
    step j comes from an attempt whose steps 0..j-1 are the ones already taken (same digests): the retry that
    resumed from them, or the attempt itself; a retry that started over cannot continue what was taken, and the
    index then ends where it was. `now()` gives the attempts seen so far and whether the Job has ended (nothing
    more will come)."""

    def __init__(self, now: Callable[[], tuple[list[Attempt], bool]], base_seed: int, workers: int,
                 sleep: Callable[[float], None] = time.sleep, note: Callable[[str], None] = lambda _: None) -> None:
        self.now, self.base_seed, self.n, self.sleep, self.note = now, base_seed, workers, sleep, note
        self.taken: dict[int, list[dict[str, Any]]] = {}  # per index, the lines taken (global names, `worker`)
        self.digests: dict[int, list[object]] = {}
        self.source: dict[int, Attempt] = {}  # per index, the attempt its last line came from
        self._cache: dict[tuple[str, int], list[dict[str, Any]]] = {}

    def steps(self, a: Attempt) -> list[dict[str, Any]]:
        key = (a.pod, len(a.log.records))
        if key not in self._cache:
            self._cache[key] = _steps(a)
        return self._cache[key]

    def attempts(self) -> list[Attempt]:
        """Every attempt seen so far."""
        return self.now()[0]

    def step(self, index: int, local: int) -> dict[str, Any] | None:
        """Index `index`'s step `local` as the coordinator's record (global name, where it ran), waiting for it
        while the Job runs; None when it will not come (the Job ended, or the attempt that got furthest closed its
        log before it)."""
        said = False
        while True:
            attempts, ended = self.now()
            done = self.digests.get(index, [])
            fitting = [a for a in attempts if a.index == index
                       and [r.get("digest") for r in self.steps(a)[:len(done)]] == done]
            with_step = [a for a in fitting if len(self.steps(a)) > local]
            if with_step:
                a = max(with_step, key=lambda x: (x.complete, len(self.steps(x))))
                r = self.steps(a)[local]
                ran = r.get("worker") or {}  # a retried worker's resumed records name the earlier pod
                line = {**r, "name": f"{str(r['name'])[0]}{global_number(index, local, self.n)}",
                        "worker": {"index": index, "pod": ran.get("pod", a.pod), "node": ran.get("node", a.node),
                                   "step": local}}
                self.taken.setdefault(index, []).append(line)
                self.digests.setdefault(index, []).append(r.get("digest"))
                self.source[index] = a
                return line
            if ended or any(a.complete for a in fitting):
                return None
            if not said:
                self.note(f"worker {index}: waiting for its step {local}")
                said = True
            self.sleep(1.0)

    def workers(self) -> list[WorkerRecords]:
        """Per index, what was taken (and from which attempt): an index whose records were not taken yet shows its
        attempt that got furthest, with no lines."""
        best = chosen(self.attempts())
        out = []
        for i in sorted(set(best) | set(self.source)):
            lines = self.taken.get(i, [])
            out.append(WorkerRecords(i, worker_seed(self.base_seed, i), self.source.get(i) or best[i], list(lines),
                                     len(lines)))
        return out


class Coordinator(Search):
    """The campaign's coordinator: each worker's search replayed from its records as they arrive (the same draws,
    so the same genomes, checked by digest), its hits confirmed on a control plane here while the Job still runs;
    then the shrink phase, as a local search. Trials no record has are not run: a worker's search ends where its
    records end."""

    def __init__(self, settings: Settings, feed: Feed, campaign: Campaign, job_seconds: float,
                 note: Callable[[str], None], progress: Callable[[Outcome], None] | None = None,
                 checkpoint: Callable[[Outcome], object] | None = None) -> None:
        super().__init__(replace(settings, fresh=True), note, progress, checkpoint)
        self.feed, self.campaign, self.job_seconds = feed, campaign, job_seconds
        self.index = 0
        self.serving = False
        self.served_steps = 0

    def trial_number(self, drawn: int) -> int:
        """Worker `index`'s step `drawn`, numbered apart from every other worker's."""
        return global_number(self.index, drawn, self.campaign.workers)

    def elapsed(self) -> float:
        """The Job's time before the coordinator began, and the coordinator's own since."""
        return self.job_seconds + time.monotonic() - self.t_start

    def trial(self, scheduler: str, genome: Genome, name: str, tier: Tier = SEARCH) -> TrialResult:
        """A search step is taken from its worker's record (waited for while the Job runs), never run here."""
        if self.serving and resume.search_step(name):
            local = (int(name[1:]) - self.index) // self.campaign.workers
            line = self.feed.step(self.index, local)
            if line is None:
                raise EndOfIndex(name)
            if line["name"] != name:
                raise resume.ResumeError(f"its trial {name} was recorded as {line['name']}: another --canary-every")
            self.records.by_name[name] = line
            with self.journal.open("a") as f:  # the campaign's trials, as taken; the coordinator's own runs between
                f.write(json.dumps(line) + "\n")
            # Search.trial serves it (ResumeError if it drew another profile): nothing runs here
        return super().trial(scheduler, genome, name, tier)

    def search(self, out: Outcome) -> None:
        """Each worker's search phase in turn, step by step from its records as they come."""
        base = self.s
        self.records = resume.Records([])
        ran: dict[str, int] = {}
        fired: dict[str, int] = {}
        prechecked = 0
        try:
            for index in range(self.campaign.workers):
                self.index = index
                seed = worker_seed(base.seed, index)
                self.s = replace(base, seed=seed, max_trials=None, budget=math.inf)
                self.ran, self.fired, self.prechecked = {}, {}, 0  # the pre-check's learning is the worker's own
                self.note(f"worker {index} (seed {seed}): its search steps as they come")
                self.serving = True
                try:
                    super().search(out)
                except EndOfIndex:
                    pass
                finally:
                    self.serving = False
                taken = self.feed.taken.get(index, [])
                pods = sorted({str(x["worker"]["pod"]) for x in taken})
                self.note(f"worker {index}: {len(taken)} search steps taken (from {', '.join(pods) or 'no pod'})")
                for total, own in ((ran, self.ran), (fired, self.fired)):
                    for k, v in own.items():
                        total[k] = total.get(k, 0) + v
                prechecked += self.prechecked
        finally:
            self.s = base
            self.ran, self.fired, self.prechecked = ran, fired, prechecked
        self.served_steps = self.records.served
        out.tokens = len(set().union(*(t.tokens for t in out.trials))) if out.trials else 0
        out.prechecked = prechecked
        out.search_seconds = self.elapsed()

    def snapshot(self, out: Outcome) -> None:
        """As a local search's, but the steps served from the workers' records are the campaign's, not a resume."""
        super().snapshot(out)
        out.resumed = 0


def where(out: Outcome, workers: list[WorkerRecords], attempts: list[Attempt], campaign: Campaign,
          job_seconds: float) -> dict[str, Any]:
    """campaign.json: the Job, every attempt, and for every trial the index, pod and node it ran on."""
    trials: dict[str, Any] = {}
    for w in workers:
        for line in w.lines:
            trials[str(line["name"])] = line["worker"]
    return {"job": campaign.name, "namespace": campaign.namespace, "workers": campaign.workers,
            "parallelism": campaign.parallelism or campaign.workers, "retriesPerIndex": campaign.retries_per_index,
            "image": campaign.image, "jobSeconds": round(job_seconds, 1),
            "seeds": {str(w.index): w.seed for w in workers},
            "taken": {str(w.index): w.attempt.pod for w in workers},
            "attempts": [a.as_dict() for a in attempts], "trials": trials,
            "coordinator": {"hits": [h.trial for h in out.hits]}}


def unfinished(attempts: list[dict[str, Any]], workers: int) -> dict[int, str]:
    """Every index no attempt finished (none succeeded with its log closed), with what its attempts did (as in
    campaign.json's `attempts`): the campaign's search is short of those indexes' trials."""
    by_index: dict[int, list[dict[str, Any]]] = {}
    for a in attempts:
        by_index.setdefault(int(a["index"]), []).append(a)
    said: dict[int, str] = {}
    for i in range(workers):
        mine = by_index.get(i, [])
        if any(a["phase"] == "Succeeded" and a["done"] is not None for a in mine):
            continue
        said[i] = "; ".join(f"{a['pod']} {a['phase']}{' (' + a['reason'] + ')' if a['reason'] else ''}, "
                            f"{a['records']} records" for a in mine) or "no pod ran"
    return said


def unfinished_message(job_name: str, missing: dict[int, str]) -> str:
    """What the coordinator says on stderr when indexes did not finish."""
    return (f"campaign {job_name}: {len(missing)} index(es) did not finish their search (no attempt closed its log), "
            "so the verdict covers only the trials that came back: "
            + "; ".join(f"index {i}: {what}" for i, what in sorted(missing.items())))


def _names(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 12 else f"{', '.join(names[:6])}, … {', '.join(names[-3:])}"


def where_lines(doc: dict[str, Any], workers: list[WorkerRecords], out: Outcome) -> list[str]:
    """The report's section on where the trials ran."""
    n = doc["workers"]
    lines = ["## Where the trials ran", "",
             f"Campaign Job `{doc['namespace']}/{doc['job']}`: {n} workers (Indexed, parallelism "
             f"{doc['parallelism']}, retries per index: {doc['retriesPerIndex']}), image `{doc['image']}`, "
             f"{doc['jobSeconds']:.0f} s from the Job's creation to its end. Worker *i* searched with seed "
             f"{out.settings.seed} + *i* on a control plane inside its pod; its step *j* is trial "
             f"t*(j·{n} + i)* here (a canary: c…). The coordinator took the workers' searches in index order (so a "
             f"known bug is confirmed at the first hit of the lowest index) and replayed, controlled and shrank "
             f"here.", "",
             "| index | seed | pod (records taken) | node | steps | trials | trial s | other attempts |",
             "|---|---|---|---|---|---|---|---|"]
    by_index: dict[int, list[dict[str, Any]]] = {}
    for a in doc["attempts"]:
        by_index.setdefault(int(a["index"]), []).append(a)
    for w in workers:
        others = [a for a in by_index.get(w.index, []) if a["pod"] != w.attempt.pod]
        other = "; ".join(f"{a['pod']} ({a['phase']}{', ' + a['reason'] if a['reason'] else ''}, "
                          f"{a['records']} records seen)" for a in others) or "-"
        state = "" if w.attempt.complete else f" **({w.attempt.phase}, not finished)**"
        seconds = sum(float(line.get("seconds", 0.0)) for line in w.lines)
        lines.append(f"| {w.index} | {w.seed} | {w.attempt.pod}{state} | {w.attempt.node or '-'} | {w.steps} | "
                     f"{_names([str(line['name']) for line in w.lines])} | {seconds:.0f} | {other} |")
    missing = sorted(set(range(n)) - {w.index for w in workers})
    if missing:
        lines.append(f"\nIndexes with no attempt that ran a trial: {', '.join(map(str, missing))}.")
    short = unfinished(doc["attempts"], n)
    if short:
        lines.append(f"\n**Not finished**: index(es) {', '.join(map(str, sorted(short)))} (no attempt closed its "
                     "log); the search is short of their trials and the campaign exits non-zero (3 when nothing "
                     "was confirmed).")
    place = doc["trials"]
    if out.hits:
        lines += ["", "Hits, where they ran: " + "; ".join(
            f"t{h.trial}: index {place[f't{h.trial}']['index']}, step {place[f't{h.trial}']['step']}, pod "
            f"{place[f't{h.trial}']['pod']}" for h in out.hits if f"t{h.trial}" in place) + "."]
    return [*lines, ""]


def write_campaign(out: Outcome, workers: list[WorkerRecords], attempts: list[Attempt], campaign: Campaign,
                   job_seconds: float) -> Path:
    """campaign.json, and the section on where the trials ran added to report.md (after output.write)."""
    doc = where(out, workers, attempts, campaign, job_seconds)
    d = out.settings.out
    (d / "campaign.json").write_text(json.dumps(doc, indent=1))
    report = d / "report.md"
    text = report.read_text() if report.exists() else ""
    report.write_text(text.rstrip("\n") + "\n\n" + "\n".join(where_lines(doc, workers, out)))
    return report
