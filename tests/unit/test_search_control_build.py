"""A search's control by build: `--control build:released` runs the target scheduler as released (no patch, no
source tree) under the same profile, so a hit is confirmed only where the patched build alone breaks;
`--control build:patch=FILE` runs it with FILE applied (a bug planted on a fixed base, controlled by the base)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kube_fault_proxy import shipped
from kube_fault_proxy.cli import search as search_cli
from kube_fault_proxy.cli.main import main, parser
from kube_fault_proxy.cli.search import _settings
from kube_fault_proxy.rig.cluster import build
from kube_fault_proxy.rig.search import control as controls
from kube_fault_proxy.rig.search import engine
from kube_fault_proxy.rig.search.engine import Search
from kube_fault_proxy.rig.search.genome import Genome
from kube_fault_proxy.rig.search.outcome import Settings
from kube_fault_proxy.rig.search.output import write
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
    (["--scheduler", "yunikorn", "--control", "build:v1.8.0"],
     "a control by build is build:released (the target scheduler as released, without the target's patch or source "
     "tree) or build:patch=FILE (released with FILE applied); 'v1.8.0' is neither"),
])
def test_a_control_by_build_needs_a_patched_target_and_names_the_released_one(
        argv: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", *argv, "--budget", "1m", "-o", str(tmp_path)]) == 2
    assert said in capsys.readouterr().err


def fake_rigs(monkeypatch: pytest.MonkeyPatch, released_breaks: bool) -> list[tuple[str, str, Path | None]]:
    """Rigs that record their start (state directory, scheduler, patch) and their stop; a faulted trial on the
    build with the planted bug (planted.patch) breaks no-assumed-pod-left, and on the control's build (released, or
    with a base patch) only when `released_breaks`."""
    events: list[tuple[str, str, Path | None]] = []

    @contextlib.contextmanager
    def running(state_dir: Path, scheduler: str, nodes: int, profiles: Path, patch: Path | None,
                source: Path | None, gates: Mapping[str, Mapping[str, bool]],
                kinds: tuple[str, ...] = (), kubernetes: str = "", devices: bool = False,
                gangs: bool = False, kube_scheduler_patch: Path | None = None) -> Iterator[Any]:
        patch = patch if scheduler == "yunikorn" else kube_scheduler_patch  # each rig takes its scheduler's patch
        events.append(("start", state_dir.name, patch))
        release = "yunikorn v1.9.0" if scheduler == "yunikorn" else "kube-scheduler v1.37.2"
        build = f"{release}+{patch.stem}" if patch else release
        try:
            yield SimpleNamespace(build=build, cluster=SimpleNamespace(processes={}), patched=patch is not None and patch.stem == "planted")
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


@pytest.fixture
def base(tmp_path: Path) -> Path:
    p = tmp_path / "fixed-base.patch"
    p.write_text("A fix the bug is planted on.\n\n--- a/y.go\n+++ b/y.go\n@@ -1 +1 @@\n-c\n+d\n")
    return p


def search_args(tmp_path: Path, *argv: str) -> argparse.Namespace:
    return parser().parse_args(["search", "--scheduler", "yunikorn", *argv, "--budget", "1m",
                                "-o", str(tmp_path / "out")])


def test_a_bug_planted_on_a_fixed_base_takes_the_base_as_its_control(tmp_path: Path, patch: Path, base: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = _settings(search_args(tmp_path, "--yunikorn-patch", str(patch), "--control", "build:patch=fixed-base.patch"))
    assert s.control == f"build:patch={base.resolve()}" and s.yunikorn_patch == patch  # the file's absolute path
    assert controls.is_build(s.control) and not controls.is_gates(s.control)
    assert controls.build_patch(s.control) == base.resolve() and controls.build_patch(controls.RELEASED) is None
    assert controls.state_name(s.control) == "build-patch-fixed-base"  # its name, not its directory
    source = _settings(search_args(tmp_path, "--yunikorn-source", str(tmp_path), "--control", f"build:patch={base}"))
    assert source.control == f"build:patch={base.resolve()}"  # a source build may be controlled by a patched one


def test_a_control_by_patch_finds_a_shipped_patch_by_name(tmp_path: Path, patch: Path) -> None:
    s = _settings(search_args(tmp_path, "--yunikorn-patch", str(patch),
                              "--control", "build:patch=3355-forget-pod-reverts-with-expiry"))
    shipped_fix = shipped.PATCHES / "yunikorn" / "3355-forget-pod-reverts-with-expiry.patch"
    assert s.control == f"build:patch={shipped_fix.resolve()}"
    assert controls.state_name(s.control) == "build-patch-3355-forget-pod-reverts-with-expiry"


@pytest.mark.parametrize(("argv", "said"), [
    (["--yunikorn-patch", "{patch}", "--control", "build:patch={tmp}/nowhere.patch"],
     "--control build:patch={tmp}/nowhere.patch: {tmp}/nowhere.patch is no file (nor the name of a shipped patch)"),
    (["--yunikorn-patch", "{patch}", "--control", "build:patch={notes}"],
     "--control build:patch={notes}: not a patch: {notes}: no unified diff in it"),
    (["--yunikorn-patch", "{patch}", "--control", "build:patch="],
     "--control build:patch=: name the patch file (build:patch=FILE, or a shipped patch's name: "
     "3355-assumed-pod-expiry, "),
    (["--control", "build:patch={base}"],
     "--control build:patch={base}: the target is the released build already; build:patch=FILE controls a patched "
     "or source build (--yunikorn-patch, --yunikorn-source, --kube-scheduler-patch)"),
    (["--yunikorn-patch", "{base}", "--control", "build:patch={base}"],
     "the target's --yunikorn-patch is the same patch, so the control would be the target's own build"),
])
def test_a_control_by_patch_is_refused_naming_what_is_wrong(argv: list[str], said: str, tmp_path: Path, patch: Path,
                                                            base: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "notes.patch"
    notes.write_text("Only words, no diff.\n")
    where = {"patch": patch, "base": base, "notes": notes, "tmp": tmp_path}
    assert main(["search", "--scheduler", "yunikorn", *[a.format(**where) for a in argv], "--budget", "1m",
                 "-o", str(tmp_path / "out")]) == 2
    assert said.format(**where) in capsys.readouterr().err


def test_a_control_by_patch_needs_a_patchable_scheduler_as_the_target(tmp_path: Path, base: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "--target", "kube-controller-manager", "--control", f"build:patch={base}", "--budget",
                 "1m", "-o", str(tmp_path / "out")]) == 2
    assert (f"--control build:patch={base}: a control by patch is the target scheduler as released with that "
            "patch; it needs --target yunikorn or kube-scheduler") in capsys.readouterr().err


def on_base(tmp_path: Path, patch: Path, base: Path) -> Settings:
    return dataclasses.replace(released_control(tmp_path, patch), control=f"{controls.PATCH}{base.resolve()}")


def test_a_hit_only_the_bug_on_the_base_shows_is_confirmed_and_the_report_names_the_control_build(
        tmp_path: Path, patch: Path, base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = fake_rigs(monkeypatch, released_breaks=False)
    s = on_base(tmp_path, patch, base)
    out = Search(s, lambda _: None).run()
    assert [h.verdict for h in out.hits] == ["confirmed", "confirmed"] and out.findings
    target, control = ("yunikorn", patch), ("build-patch-fixed-base", base.resolve())
    assert events[:4] == [("start", *target), ("stop", *target), ("start", *control), ("stop", *control)]
    assert [e[0] for e in events] == ["start", "stop"] * (len(events) // 2)  # one YuniKorn at a time
    assert out.builds[str(s.control)] == "yunikorn v1.9.0+fixed-base"
    write(out, ["kube-fault-proxy", "search"])
    doc = json.loads((s.out / "search.json").read_text())
    assert (doc["control"], doc["build"], doc["controlBuild"]) == (
        s.control, "yunikorn v1.9.0+planted", "yunikorn v1.9.0+fixed-base")
    assert f"- control {s.control}: yunikorn v1.9.0+fixed-base\n" in (s.out / "report.md").read_text()


def test_a_hit_the_base_shows_too_is_not_the_planted_bugs(tmp_path: Path, patch: Path, base: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    fake_rigs(monkeypatch, released_breaks=True)
    out = Search(on_base(tmp_path, patch, base), lambda _: None).run()
    assert [h.verdict for h in out.hits] == ["control-broken", "control-broken"] and not out.findings


def builds_before_search(monkeypatch: pytest.MonkeyPatch, binary: str, args: argparse.Namespace) -> list[
        tuple[list[str], str]]:
    """What `search` builds before its first trial (the search itself stopped there): per build_all call, the
    components asked for and the version of `binary` it builds."""
    built: list[tuple[list[str], str]] = []

    class Started(Exception):
        pass

    def build_all(names: list[str], say: bool = True, overrides: dict[str, Any] | None = None) -> dict[str, Path]:
        built.append((names, (overrides or {})[binary].version))
        return {}

    def search(*_: Any) -> Any:
        raise Started

    monkeypatch.setattr(search_cli.build, "build_all", build_all)
    monkeypatch.setattr(search_cli, "Search", search)
    with pytest.raises(Started):
        search_cli._search(args)
    return built


def test_the_control_by_patch_is_built_before_any_trial(tmp_path: Path, patch: Path, base: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    built = builds_before_search(monkeypatch, "yunikorn-scheduler", search_args(
        tmp_path, "--yunikorn-patch", str(patch), "--control", f"build:patch={base}"))
    assert built[0] == (["etcd", "kube-apiserver", "yunikorn-scheduler"], build.yunikorn(patch).version)
    assert built[1] == (["yunikorn-scheduler"], build.yunikorn(base).version)
    assert len(built) == 2


# A patched kube-scheduler (`--kube-scheduler-patch`): its release with the patch, controlled by the release.

def ks_args(tmp_path: Path, *argv: str) -> argparse.Namespace:
    return parser().parse_args(["search", "--target", "kube-scheduler", *argv, "--budget", "1m",
                                "-o", str(tmp_path / "out")])


def test_a_patched_kube_scheduler_search_takes_its_release_or_a_base_as_its_control(tmp_path: Path, patch: Path,
                                                                                    base: Path) -> None:
    s = _settings(ks_args(tmp_path, "--kube-scheduler-patch", str(patch), "--control", "build:released"))
    assert (s.scheduler, s.control, s.kube_scheduler_patch, s.yunikorn_patch) == (
        "kube-scheduler", controls.RELEASED, patch, None)
    on_base = _settings(ks_args(tmp_path, "--kube-scheduler-patch", str(patch), "--control", f"build:patch={base}"))
    assert on_base.control == f"build:patch={base.resolve()}"
    assert controls.state_name(str(on_base.control)) == "build-patch-fixed-base"


@pytest.mark.parametrize(("argv", "said"), [
    (["--target", "yunikorn", "--kube-scheduler-patch", "{patch}"],
     "--kube-scheduler-patch builds the kube-scheduler under test: it needs --target kube-scheduler"),
    (["--target", "kube-scheduler", "--kube-scheduler-patch", "{tmp}/gone.patch"],
     "--kube-scheduler-patch {tmp}/gone.patch: cannot read {tmp}/gone.patch"),
    (["--target", "kube-scheduler", "--kube-scheduler-patch", "{notes}"],
     "--kube-scheduler-patch {notes}: not a patch: {notes}: no unified diff in it"),
    (["--target", "kube-scheduler", "--kube-scheduler-patch", "{base}", "--control", "build:patch={base}"],
     "the target's --kube-scheduler-patch is the same patch, so the control would be the target's own build"),
    (["--target", "kube-scheduler", "--kube-scheduler-patch", "{patch}", "--print-job"],
     "--kube-scheduler-patch builds on this machine; a campaign's workers run the image's kube-scheduler"),
    (["--target", "kube-scheduler", "--yunikorn-patch", "{patch}"],
     "--yunikorn-patch and --yunikorn-source build the YuniKorn under test: they need --scheduler yunikorn"),
])
def test_a_kube_scheduler_patch_is_refused_before_anything_naming_the_file(
        argv: list[str], said: str, tmp_path: Path, patch: Path, base: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "notes.patch"
    notes.write_text("Only words, no diff.\n")
    where = {"patch": patch, "base": base, "notes": notes, "tmp": tmp_path}
    assert main(["search", *[a.format(**where) for a in argv], "--budget", "1m", "-o", str(tmp_path / "out")]) == 2
    assert said.format(**where) in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_hit_only_the_patched_kube_scheduler_shows_is_confirmed_with_both_rigs_up_at_once(
        tmp_path: Path, patch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = fake_rigs(monkeypatch, released_breaks=False)
    s = dataclasses.replace(released_control(tmp_path, patch), scheduler="kube-scheduler", yunikorn_patch=None,
                            kube_scheduler_patch=patch)
    out = Search(s, lambda _: None).run()
    assert [h.verdict for h in out.hits] == ["confirmed", "confirmed"] and out.findings
    # kube-scheduler has no fixed port: the target's rig stays up while its control's runs; both stop at the end
    assert events[:2] == [("start", "kube-scheduler", patch), ("start", "build-released", None)]
    assert sorted(events[2:]) == sorted([("stop", "kube-scheduler", patch), ("stop", "build-released", None)])
    assert (out.builds["kube-scheduler"], out.builds[controls.RELEASED]) == (
        "kube-scheduler v1.37.2+planted", "kube-scheduler v1.37.2")
    report = write(out, ["kube-fault-proxy", "search"]).read_text()
    doc = json.loads((s.out / "search.json").read_text())
    assert (doc["kubeSchedulerPatch"], doc["yunikornPatch"]) == (str(patch.resolve()), None)
    assert "kube-fault-proxy search replay" in report and "scenario run" not in report  # none runs a patched one


@pytest.mark.parametrize("control", ["build:released", "build:patch={base}"])
def test_the_patched_kube_scheduler_and_its_control_are_built_before_any_trial_each_its_own_binary(
        control: str, tmp_path: Path, patch: Path, base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built = builds_before_search(monkeypatch, "kube-scheduler", ks_args(
        tmp_path, "--kube-scheduler-patch", str(patch), "--control", control.format(base=base)))
    planted = build.kube_scheduler(patch).version
    assert planted.startswith("v1.37.2+planted-") and planted != build.ALL["kube-scheduler"].version
    assert built[0] == (["etcd", "kube-apiserver", "kube-scheduler"], planted)
    assert built[1] == (["kube-scheduler"], build.ALL["kube-scheduler"].version if control == "build:released"
                        else build.kube_scheduler(base).version)
    assert len(built) == 2


def test_a_replay_of_a_patched_kube_scheduler_search_runs_the_patched_build(
        tmp_path: Path, patch: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from kube_fault_proxy.rig.search.trial import Rig

    given: list[tuple[str, Path | None, Path | None]] = []

    @contextlib.contextmanager
    def running(state_dir: Path, scheduler: str, nodes: int, profiles: Path, yk_patch: Path | None, *_: Any,
                kube_scheduler_patch: Path | None = None, **__: Any) -> Iterator[Any]:
        given.append((scheduler, yk_patch, kube_scheduler_patch))
        yield SimpleNamespace(build=f"kube-scheduler v1.37.2+{patch.stem}")

    def trial(rig: Any, genome: Genome, name: str, tier: Tier, note: Any) -> TrialResult:
        return TrialResult(name, "kube-scheduler", genome, broken=["stranded"])

    monkeypatch.setattr(Rig, "running", running)
    monkeypatch.setattr(search_cli, "run_trial", trial)
    minimal = {"rules": [], "pods": 20, "action": None, "seed": 1, "nodes": 2}
    (tmp_path / "search.json").write_text(json.dumps({
        "minimal": minimal, "target": ["stranded"], "scheduler": "kube-scheduler", "nodes": 10,
        "kubeSchedulerPatch": str(patch), "yunikornPatch": None}))
    assert main(["search", "replay", str(tmp_path), "--times", "1", "--state-dir", str(tmp_path / "s")]) == 1
    assert given == [("kube-scheduler", None, patch)]
    assert "1/1 replays broke stranded on kube-scheduler v1.37.2+planted" in capsys.readouterr().out
