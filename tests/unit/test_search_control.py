"""A search's target gates and its differential control by gates: what the command line takes, and a hit with a gate
on confirmed against the same build with it off (and the reverse), on fake rigs and trials."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kube_fault_proxy.cli.main import main, parser
from kube_fault_proxy.cli.search import _settings
from kube_fault_proxy.rig.search import control as controls
from kube_fault_proxy.rig.search import engine
from kube_fault_proxy.rig.search.engine import Search
from kube_fault_proxy.rig.search.genome import Genome
from kube_fault_proxy.rig.search.outcome import UNFAULTED, Settings
from kube_fault_proxy.rig.search.trial import Tier, TrialResult

ASYNC = "SchedulerAsyncAPICalls"
ON = {"kube-scheduler": {ASYNC: True}}


def settings_of(tmp_path: Path, *more: str) -> Settings:
    args = parser().parse_args(["search", "--scheduler", "kube-scheduler", "--budget", "1m", "-o", str(tmp_path),
                                *more])
    return _settings(args)


def test_a_search_with_gates_is_controlled_by_the_same_build_with_them_flipped(tmp_path: Path) -> None:
    s = settings_of(tmp_path, "--feature-gates", f"kube-scheduler:{ASYNC}=true")
    assert s.feature_gates == ON and s.control == f"gates:{ASYNC}=false"
    s = settings_of(tmp_path, "--feature-gates", f"kube-scheduler:{ASYNC}=false", "--feature-gates",
                    "kube-apiserver:WatchList=true")
    assert s.control == f"gates:kube-apiserver:WatchList=false,{ASYNC}=true"
    assert settings_of(tmp_path).control == UNFAULTED  # no gates: as before
    s = settings_of(tmp_path, "--feature-gates", f"kube-scheduler:{ASYNC}=true", "--control", UNFAULTED)
    assert s.control == UNFAULTED and s.feature_gates == ON


def test_a_control_by_gates_changes_only_what_it_names() -> None:
    target = {"kube-scheduler": {ASYNC: True, "SchedulerPopFromBackoffQ": False}}
    changes = controls.parse(f"gates:{ASYNC}=false", "kube-scheduler")
    assert changes == {"kube-scheduler": {ASYNC: False}}
    assert controls.merged(target, changes) == {"kube-scheduler": {ASYNC: False, "SchedulerPopFromBackoffQ": False}}
    assert controls.parse("gates:kube-apiserver:WatchList=false", "kube-scheduler") == {
        "kube-apiserver": {"WatchList": False}}
    assert controls.state_name(f"gates:{ASYNC}=false") == f"gates-{ASYNC}-false"


@pytest.mark.parametrize(("argv", "said"), [
    (["--control", "gates:"], "name at least one gate"),
    (["--control", f"gates:{ASYNC}=maybe"], "'maybe' is not true or false"),
    (["--control", "gates:kube-controller-manager:StaleControllerConsistencyReplicaSet=false"],
     "cannot set kube-controller-manager's gates"),
    (["--feature-gates", f"kube-scheduler:{ASYNC}=true", "--control", f"gates:{ASYNC}=true"],
     "the target already runs with these gates"),
    (["--feature-gates", "kube-controller-manager:StaleControllerConsistencyJob=false"],
     "needs --target kube-controller-manager"),
    (["--control", "kube-schedulr"], "one of yunikorn, kube-scheduler, unfaulted, none, build:released, build:patch=FILE, or gates:GATE=BOOL"),
])
def test_bad_targets_and_controls_are_usage_errors_naming_them(argv: list[str], said: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "--scheduler", "kube-scheduler", "--budget", "1m", "-o", str(tmp_path), *argv]) == 2
    assert said in capsys.readouterr().err


def test_kube_scheduler_gates_need_a_kube_scheduler_search(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "--scheduler", "yunikorn", "--budget", "1m", "-o", str(tmp_path),
                 "--feature-gates", f"kube-scheduler:{ASYNC}=true"]) == 2
    assert "needs --target kube-scheduler" in capsys.readouterr().err


# --- confirmation against the control by gates, on fake rigs: the gate on breaks no-pod-waits-past-bound


def fake_rigs(monkeypatch: pytest.MonkeyPatch, breaks_when: bool | None) -> list[tuple[str, dict[str, Any]]]:
    """Rigs that remember their gates; a faulted trial breaks the wait invariant when the gate is `breaks_when`
    (None: whatever it is)."""
    started: list[tuple[str, dict[str, Any]]] = []

    @contextlib.contextmanager
    def running(state_dir: Path, scheduler: str, nodes: int, profiles: Path, patch: Path | None,
                source: Path | None, gates: Mapping[str, Mapping[str, bool]],
                kinds: tuple[str, ...] = (), kubernetes: str = "", devices: bool = False,
                gangs: bool = False, kube_scheduler_patch: Path | None = None) -> Iterator[Any]:
        assert kube_scheduler_patch is None  # no patched build under test
        assert kubernetes == "v1.37.2"  # the search's release (the default), passed to every rig
        assert not devices and not gangs  # no device or gang shape drawn: no extra controller
        started.append((state_dir.name, {c: dict(g) for c, g in gates.items()}))
        on = gates.get("kube-scheduler", {}).get(ASYNC)
        build = f"kube-scheduler v1.36.3 {ASYNC}={'true' if on else 'false'}"
        yield SimpleNamespace(build=build, cluster=SimpleNamespace(processes={}), on=on)

    def trial(rig: Any, genome: Genome, name: str, tier: Tier, note: Any) -> TrialResult:
        broke = bool(genome.rules) and (breaks_when is None or rig.on is breaks_when)
        return TrialResult(name, "kube-scheduler", genome, broken=["no-pod-waits-past-bound"] if broke else [],
                           injections=3 if genome.rules else 0, fired={r["name"] for r in genome.rules}, seconds=1.0)

    monkeypatch.setattr(engine.Rig, "running", running)
    monkeypatch.setattr(engine, "run_trial", trial)
    return started


def differential(tmp_path: Path, target_on: bool) -> Settings:
    return Settings(scheduler="kube-scheduler", control=f"gates:{ASYNC}={'false' if target_on else 'true'}",
                    budget=3600, seed=3, kinds=("delay",), out=tmp_path / "out", state_dir=tmp_path / "state",
                    profiles_dir=tmp_path, pods=40, shrink_budget=5, replays=1, max_trials=2, canary_every=0,
                    feature_gates={"kube-scheduler": {ASYNC: target_on}})


def test_a_hit_with_the_gate_on_is_confirmed_when_the_gate_off_keeps_it(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    started = fake_rigs(monkeypatch, breaks_when=True)
    out = Search(differential(tmp_path, True), lambda _: None).run()
    assert [h.verdict for h in out.hits] == ["confirmed", "confirmed"] and out.findings
    assert all(h.control == [] for h in out.hits) and out.findings[0].minimal_control == []
    assert started == [("kube-scheduler", ON), (f"gates-{ASYNC}-false", {"kube-scheduler": {ASYNC: False}})]
    assert out.builds[f"gates:{ASYNC}=false"] == f"kube-scheduler v1.36.3 {ASYNC}=false"


def test_the_reverse_a_hit_with_the_gate_off_is_confirmed_against_it_on(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    fake_rigs(monkeypatch, breaks_when=False)
    out = Search(differential(tmp_path, False), lambda _: None).run()
    assert {h.verdict for h in out.hits} == {"confirmed"}


def test_a_hit_both_settings_show_is_the_faults_not_the_gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_rigs(monkeypatch, breaks_when=None)
    out = Search(differential(tmp_path, True), lambda _: None).run()
    assert [h.verdict for h in out.hits] == ["control-broken", "control-broken"] and not out.findings
    assert out.hits[0].control == ["no-pod-waits-past-bound"]
