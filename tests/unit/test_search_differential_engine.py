"""The differential oracle inside the search, on fake rigs: each workload's clean runs are learned once, a trial
that breaks no invariant but ends where no clean run did breaks `diverged` and is confirmed like any hit, and
placement that differs between clean runs is never a finding."""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kube_fault_proxy.cli.main import main
from kube_fault_proxy.rig.search import engine
from kube_fault_proxy.rig.search.engine import Search
from kube_fault_proxy.rig.search.genome import Genome
from kube_fault_proxy.rig.search.outcome import UNFAULTED, Settings
from kube_fault_proxy.rig.search.output import write
from kube_fault_proxy.rig.search.trial import Tier, TrialResult


def fake_rigs(monkeypatch: pytest.MonkeyPatch, faulted_bound: int, clean_breaks: bool = False) -> list[str]:
    """One rig; a trial of 4 pods ends with all 4 bound, placed differently run to run, or (with faults) with
    `faulted_bound` bound and the rest pending. No invariant ever breaks (unless `clean_breaks`: then a clean run
    breaks `stranded`). Returns the names of the trials run."""
    names: list[str] = []
    spread = itertools.count()

    @contextlib.contextmanager
    def running(*_: Any, **__: Any) -> Iterator[Any]:
        yield SimpleNamespace(build="kube-scheduler v1.37.2", cluster=SimpleNamespace(processes={}))

    def trial(rig: Any, genome: Genome, name: str, tier: Tier, note: Any) -> TrialResult:
        names.append(name)
        bound = faulted_bound if genome.rules else 4
        on_n1 = next(spread) % 3  # placement differs between clean runs
        state = {"pods": 4, "pods/bound": bound, "pods/pending": 4 - bound, "node/n1/pods": min(on_n1, bound),
                 "node/n2/pods": bound - min(on_n1, bound)}
        broken = ["stranded"] if clean_breaks and not genome.rules else []
        return TrialResult(name, "kube-scheduler", genome, broken=broken, injections=2 if genome.rules else 0,
                           fired={r["name"] for r in genome.rules}, seconds=1.0, end_state=state)

    monkeypatch.setattr(engine.Rig, "running", running)
    monkeypatch.setattr(engine, "run_trial", trial)
    return names


def settings(tmp_path: Path, k: int = 3) -> Settings:
    return Settings(scheduler="kube-scheduler", control=UNFAULTED, budget=3600, seed=3, kinds=("delay",),
                    out=tmp_path / "out", state_dir=tmp_path / "state", profiles_dir=tmp_path, pods=40,
                    shrink_budget=5, replays=1, max_trials=2, canary_every=0, shapes=("roomy",), differential=k)


def test_a_trial_that_ends_where_no_clean_run_did_is_a_confirmed_divergence(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    names = fake_rigs(monkeypatch, faulted_bound=3)
    out = Search(settings(tmp_path), lambda _: None).run()
    assert [t.broken for t in out.trials] == [["diverged"], ["diverged"]]
    assert out.trials[0].diverged == ["pods/bound: 3 (every clean run: 4)", "pods/pending: 1 (every clean run: 0)"]
    assert out.hits[0].verdict == "confirmed" and out.hits[0].control == []  # the unfaulted control ends clean
    assert out.findings and out.findings[0].target == ["diverged"]
    searched = names[:names.index("t1") + 1]  # the search phase; shrinking's smaller workloads learn their own
    baseline = searched[1:4]  # learned when t0 first needs it, once, and reused by every later trial of it
    assert [n[:1] for n in baseline] == ["b"] * 3 and len(set(baseline)) == 3
    assert [n for n in searched if n not in baseline] == ["t0", "t0-replay", "t0-control", "t0-control-2",
                                                          "t0-control-3", "t1"]
    text = write(out, ["search"]).read_text()
    assert out.baselines == 5  # the search's workload, and 4 smaller ones its shrinking tried
    assert "3 fault-free runs per workload gave 5 clean end states (0 more workloads'" in text
    assert "2 search trials ended where no clean run did, 2 of them breaking no invariant (`diverged`)" in text
    logged = [json.loads(line) for line in (tmp_path / "out" / "trials.jsonl").read_text().splitlines()]
    assert logged[3]["name"] == "t0" and logged[3]["diverged"] == out.trials[0].diverged  # kept for a resume


def test_placement_that_clean_runs_differ_on_is_no_finding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_rigs(monkeypatch, faulted_bound=4)
    out = Search(settings(tmp_path), lambda _: None).run()
    assert [t.broken for t in out.trials] == [[], []] and not out.hits
    assert [t.diverged for t in out.trials] == [[], []]


def test_clean_runs_that_break_something_give_no_baseline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_rigs(monkeypatch, faulted_bound=3, clean_breaks=True)
    notes: list[str] = []
    out = Search(settings(tmp_path), notes.append).run()
    assert [t.broken for t in out.trials] == [[], []] and out.baselines == 0 and out.untrusted_baselines == 1
    assert any("no differential baseline for this workload" in n for n in notes)


def test_off_by_default_and_never_below_three_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    names = fake_rigs(monkeypatch, faulted_bound=3)
    out = Search(settings(tmp_path, k=0), lambda _: None).run()
    assert [t.broken for t in out.trials] == [[], []] and not any(n.startswith("b") for n in names)
    assert main(["search", "--scheduler", "kube-scheduler", "--budget", "1m", "-o", str(tmp_path / "x"),
                 "--differential", "2"]) == 2
    assert "--differential 2: 0 (off) or at least 3 clean runs per workload" in capsys.readouterr().err
