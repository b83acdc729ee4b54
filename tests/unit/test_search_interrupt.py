"""A search under SIGINT and SIGTERM (the signal guard, teardown, the report written so far) and a search resumed
from its trials.jsonl: on fake trials, no sockets."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kube_fault_proxy.rig.cluster.processes import group_alive
from kube_fault_proxy.rig.search import engine
from kube_fault_proxy.rig.search.engine import Search
from kube_fault_proxy.rig.search.genome import Genome, fault_kind
from kube_fault_proxy.rig.search.interrupt import Interrupted, SignalGuard
from kube_fault_proxy.rig.search.outcome import UNFAULTED, Outcome, Settings
from kube_fault_proxy.rig.search.output import write
from kube_fault_proxy.rig.search.resume import ResumeError
from kube_fault_proxy.rig.search.trial import SEARCH, Tier, TrialResult


def settings(out: Path, **more: Any) -> Settings:
    return Settings(scheduler="kube-scheduler", control=UNFAULTED, budget=3600, seed=5,
                    kinds=("abort", "reset", "delay"), out=out, state_dir=out / "state", profiles_dir=out, pods=40,
                    shrink_budget=30, replays=2, **more)


class FakeRigs:
    """Stands in for the control planes: run_trial's calls, by name, and a signal sent during one of them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, signal_at: dict[str, int] | None = None) -> None:
        self.ran: list[str] = []
        self.signal_at = signal_at or {}
        self.closed = 0
        monkeypatch.setattr(Search, "rig", lambda s, scheduler: self._rig(s, scheduler))
        monkeypatch.setattr(engine, "run_trial", self.run_trial)
        original = Search.close

        def close(s: Search) -> None:
            self.closed += 1
            original(s)

        monkeypatch.setattr(Search, "close", close)

    def _rig(self, search: Search, scheduler: str) -> Any:
        search.builds[scheduler] = f"{scheduler} v1.36.3"
        return SimpleNamespace(scheduler=scheduler, cluster=SimpleNamespace(processes={}))

    def run_trial(self, rig: Any, genome: Genome, name: str, tier: Tier = SEARCH, note: Any = None) -> TrialResult:
        self.ran.append(name)
        if name in self.signal_at:
            os.kill(os.getpid(), self.signal_at.pop(name))  # the handler raises here, in the trial
            time.sleep(5)  # never reached: the handler raised
        kinds = {fault_kind(r) for r in genome.rules}
        broken = ["stranded"] if "abort" in kinds else []
        return TrialResult(name, rig.scheduler, genome, broken=broken, injections=3 if genome.rules else 0,
                           fired={r["name"] for r in genome.rules}, tokens={f"{name}-token"}, seconds=1.0)


def run(s: Settings) -> Outcome:
    return Search(s, lambda _: None, checkpoint=lambda o: write(o, ["search"])).run()


# --- the guard


def test_the_first_signal_ends_the_block_a_second_kills_at_once_and_handlers_come_back() -> None:
    kills: list[int] = []
    before = signal.getsignal(signal.SIGTERM)
    guard = SignalGuard(lambda: kills.append(1), lambda _: None)
    with guard.installed(), pytest.raises(Interrupted) as e:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert e.value.name == "SIGTERM" and kills == []
    with guard.installed(), guard.teardown():  # during the teardown: kill at once, never raise
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
    assert kills == [1] and guard.received == ["SIGTERM", "SIGINT"]
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_signal_during_the_teardown_of_a_search_that_ended_normally_does_not_break_it() -> None:
    kills: list[int] = []
    guard = SignalGuard(lambda: kills.append(1), lambda _: None)
    with guard.installed():
        with guard.teardown():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
        assert kills == [1] and not guard.tearing_down


def test_kill_now_sigkills_every_process_group_the_control_planes_recorded(tmp_path: Path) -> None:
    s = settings(tmp_path)
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        d = s.state_dir / "kube-scheduler"
        d.mkdir(parents=True)
        (d / "cluster.json").write_text(json.dumps({"processes": {"etcd": {"pid": proc.pid, "log": "x"}}}))
        Search(s, lambda _: None).kill_now()
        proc.wait(5)
        assert proc.returncode == -signal.SIGKILL and not group_alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()


# --- interrupted searches


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_ends_the_trial_in_progress_tears_down_and_writes_the_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sig: signal.Signals) -> None:
    rigs = FakeRigs(monkeypatch, {"t3": sig})
    before = signal.getsignal(signal.SIGINT)  # Python's default_int_handler; SIG_IGN in a pytest-xdist worker
    out = run(settings(tmp_path, max_trials=20))
    assert out.interrupted == sig.name and out.phase == "interrupted" and rigs.closed == 1
    assert [t.name for t in out.trials] == ["t0", "t1", "t2"] and rigs.ran[-1] == "t3"
    report = (tmp_path / "report.md").read_text()
    assert f"**Interrupted by {sig.name}** after 3 search trials" in report
    assert all(f"| t{i} |" in report for i in range(3)) and "| t3 |" not in report
    doc = json.loads((tmp_path / "search.json").read_text())
    assert doc["interrupted"] == sig.name and doc["trials"] == 3
    lines = [json.loads(line)["name"] for line in (tmp_path / "trials.jsonl").read_text().splitlines()]
    assert "t3" not in lines  # the trial in progress is not recorded: a resumed search runs it again
    assert signal.getsignal(signal.SIGINT) is before  # the search puts back the handler it found


def test_the_report_is_written_as_each_finding_is_confirmed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[int] = []
    FakeRigs(monkeypatch)
    Search(settings(tmp_path, max_trials=12), lambda _: None,
           checkpoint=lambda o: written.append(len(o.findings))).run()
    assert written[0] == 1 and len(written) >= 3  # at the first confirmation, then more, then at the end


# --- resuming


def test_a_resumed_search_continues_from_the_next_trial_and_draws_what_one_run_would(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rigs = FakeRigs(monkeypatch, {"t6": signal.SIGINT})
    first = run(settings(tmp_path / "a", max_trials=12, canary_every=4))
    assert first.interrupted == "SIGINT"
    rigs.ran.clear()
    second = run(settings(tmp_path / "a", max_trials=12, canary_every=4))
    assert rigs.ran[0] == "t6" and not {"t0", "t1", "t2", "c3", "t4", "t5"} & set(rigs.ran)
    assert second.resumed == 6 and second.interrupted is None and second.phase == "done"
    whole = run(settings(tmp_path / "b", max_trials=12, canary_every=4))
    assert [t.genome.digest() for t in second.trials] == [t.genome.digest() for t in whole.trials]
    assert [h.trial for h in second.hits] == [h.trial for h in whole.hits]
    assert "Resumed: 6 search steps" in (tmp_path / "a" / "report.md").read_text()


def test_a_line_cut_by_kill_9_is_dropped_and_that_trial_run_again(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    rigs = FakeRigs(monkeypatch)
    run(settings(tmp_path, max_trials=3))
    journal = tmp_path / "trials.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    last = next(i for i in reversed(range(len(lines))) if json.loads(lines[i])["name"] == "t2")
    journal.write_text("".join(lines[:last]) + lines[last][:40])
    rigs.ran.clear()
    run(settings(tmp_path, max_trials=3))
    assert rigs.ran[0] == "t2"
    assert all(json.loads(line) for line in journal.read_text().splitlines())


def test_another_seed_starts_over_and_fresh_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rigs = FakeRigs(monkeypatch)
    run(settings(tmp_path, max_trials=2))
    rigs.ran.clear()
    s = settings(tmp_path, max_trials=2)
    run(Settings(**{**s.__dict__, "seed": 6}))
    assert rigs.ran[:2] == ["t0", "t1"]
    rigs.ran.clear()
    run(Settings(**{**s.__dict__, "seed": 6, "fresh": True}))
    assert rigs.ran[:2] == ["t0", "t1"]


def test_records_of_another_draw_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    FakeRigs(monkeypatch)
    run(settings(tmp_path, max_trials=2))
    with pytest.raises(ResumeError, match="t0 was drawn as another profile"):
        run(Settings(**{**settings(tmp_path, max_trials=2).__dict__, "kinds": ("hang",)}))
