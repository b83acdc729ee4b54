"""A search's control by build: `--control build:released` runs the target scheduler as released (no patch, no
source tree) under the same profile, so a hit is confirmed only where the patched build alone breaks."""

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
from kube_fault_proxy.rig.search.outcome import Settings
from kube_fault_proxy.rig.search.trial import Tier, TrialResult


@pytest.fixture
def patch(tmp_path: Path) -> Path:
    p = tmp_path / "planted.patch"
    p.write_text("--- a/x.go\n+++ b/x.go\n@@ -1 +1 @@\n-a\n+b\n")
    return p


def test_a_patched_yunikorn_search_takes_the_released_build_as_its_control(tmp_path: Path, patch: Path) -> None:
    args = parser().parse_args(["search", "--scheduler", "yunikorn", "--yunikorn-patch", str(patch),
                                "--control", "build:released", "--budget", "1m", "-o", str(tmp_path)])
    s = _settings(args)
    assert s.control == controls.RELEASED and s.yunikorn_patch == patch
    assert controls.is_build(s.control) and not controls.is_gates(s.control)
    assert controls.state_name(s.control) == "build-released"


@pytest.mark.parametrize(("argv", "said"), [
    (["--scheduler", "yunikorn", "--control", "build:released"],
     "the target is the released build already; build:released controls a patched or source build"),
    (["--scheduler", "kube-scheduler", "--control", "build:released"], "the target is the released build already"),
    (["--scheduler", "yunikorn", "--control", "build:v1.8.0"], "the build a control names is build:released"),
])
def test_a_control_by_build_needs_a_patched_target_and_names_the_released_one(
        argv: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", *argv, "--budget", "1m", "-o", str(tmp_path)]) == 2
    assert said in capsys.readouterr().err


def fake_rigs(monkeypatch: pytest.MonkeyPatch, released_breaks: bool) -> list[tuple[str, str, Path | None]]:
    """Rigs that record their start (state directory, scheduler, patch) and their stop; a faulted trial on the
    patched build breaks no-assumed-pod-left, and on the released one only when `released_breaks`."""
    events: list[tuple[str, str, Path | None]] = []

    @contextlib.contextmanager
    def running(state_dir: Path, scheduler: str, nodes: int, profiles: Path, patch: Path | None,
                source: Path | None, gates: Mapping[str, Mapping[str, bool]],
                kinds: tuple[str, ...] = (), kubernetes: str = "", devices: bool = False,
                gangs: bool = False) -> Iterator[Any]:
        events.append(("start", state_dir.name, patch))
        build = f"yunikorn v1.9.0+{patch.stem}" if patch else "yunikorn v1.9.0"
        try:
            yield SimpleNamespace(build=build, cluster=SimpleNamespace(processes={}), patched=patch is not None)
        finally:
            events.append(("stop", state_dir.name, patch))

    def trial(rig: Any, genome: Genome, name: str, tier: Tier, note: Any) -> TrialResult:
        broke = bool(genome.rules) and (rig.patched or released_breaks)
        return TrialResult(name, "yunikorn", genome, broken=["no-assumed-pod-left"] if broke else [],
                           injections=3 if genome.rules else 0, fired={r["name"] for r in genome.rules}, seconds=1.0)

    monkeypatch.setattr(engine.Rig, "running", running)
    monkeypatch.setattr(engine, "run_trial", trial)
    return events


def released_control(tmp_path: Path, patch: Path) -> Settings:
    return Settings(scheduler="yunikorn", control=controls.RELEASED, budget=3600, seed=3, kinds=("abort",),
                    out=tmp_path / "out", state_dir=tmp_path / "state", profiles_dir=tmp_path, pods=40,
                    shrink_budget=5, replays=1, max_trials=2, canary_every=0, yunikorn_patch=patch,
                    include_known=True)


def test_a_hit_only_the_patched_build_shows_is_confirmed_against_the_released_one(
        tmp_path: Path, patch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = fake_rigs(monkeypatch, released_breaks=False)
    out = Search(released_control(tmp_path, patch), lambda _: None).run()
    assert [h.verdict for h in out.hits] == ["confirmed", "confirmed"] and out.findings
    # YuniKorn's REST port is fixed: the target and its control take turns, each stopped before the other starts
    target, control = ("yunikorn", patch), ("build-released", None)
    assert events[:6] == [("start", *target), ("stop", *target), ("start", *control), ("stop", *control),
                          ("start", *target), ("stop", *target)]
    assert [e[0] for e in events] == ["start", "stop"] * (len(events) // 2)  # never two at once, all stopped
    assert out.builds[controls.RELEASED] == "yunikorn v1.9.0"
    assert out.builds["yunikorn"] == "yunikorn v1.9.0+planted"


def test_a_hit_the_released_build_shows_too_is_not_the_patchs(tmp_path: Path, patch: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    fake_rigs(monkeypatch, released_breaks=True)
    out = Search(released_control(tmp_path, patch), lambda _: None).run()
    assert [h.verdict for h in out.hits] == ["control-broken", "control-broken"] and not out.findings
    assert out.hits[0].control == ["no-assumed-pod-left"]
