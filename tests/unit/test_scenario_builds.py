"""Which builds a scenario run compares: each scheduler as released, or as each patched build given for it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.cli import scenarios as cli_scenarios
from kube_fault_proxy.cli.exits import USAGE
from kube_fault_proxy.cli.main import main
from kube_fault_proxy.cli.scenarios import Contender, contenders_for
from kube_fault_proxy.rig.runs import runner
from kube_fault_proxy.rig.runs.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2] / "proxy" / "kube_fault_proxy"
SCENARIO = ROOT / "scenarios" / "yunikorn-3481-node-removal-race.yaml"
PATCH = """--- a/pkg/scheduler/schedule_one.go
+++ b/pkg/scheduler/schedule_one.go
@@ -1,1 +1,1 @@
-package scheduler
+package scheduler // patched
"""


def test_each_scheduler_runs_as_released_or_as_each_of_its_builds() -> None:
    ks, yk = Contender("kube-scheduler", patch=Path("fix.patch")), Contender("yunikorn", patch=Path("y.patch"))
    both = ["kube-scheduler", "yunikorn"]
    assert contenders_for(both, [], with_release=False) == [Contender("kube-scheduler"), Contender("yunikorn")]
    assert contenders_for(both, [ks, yk], with_release=False) == [ks, yk]
    assert contenders_for(both, [ks], with_release=True) == [Contender("kube-scheduler"), ks, Contender("yunikorn")]
    assert contenders_for(["yunikorn"], [ks, yk], with_release=True) == [Contender("yunikorn"), yk]


def test_a_patched_kube_scheduler_is_its_own_build_of_the_release(tmp_path: Path) -> None:
    patch = tmp_path / "fix.patch"
    patch.write_text(PATCH)
    c = Contender("kube-scheduler", patch=patch).component("v1.37.2")
    assert c is not None and c.variant == "fix" and c.version.startswith("v1.37.2+fix-")
    released = Contender("kube-scheduler").component("v1.37.2")
    assert released is not None and released.variant is None and released.version == "v1.37.2"


def test_scenario_run_refuses_a_kube_scheduler_patch_that_is_no_patch_before_anything_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def run_scenarios(*a: Any, **k: Any) -> Any:
        raise AssertionError("nothing may start")

    monkeypatch.setattr(cli_scenarios, "run_scenarios", run_scenarios)
    bad = tmp_path / "fix.patch"
    bad.write_text("not a diff\n")
    code = main(["scenario", "run", str(SCENARIO), "--scheduler", "kube-scheduler", "--kube-scheduler-patch",
                 str(bad), "-o", str(tmp_path / "out")])
    assert code == USAGE
    assert f"--kube-scheduler-patch {bad}: not a patch" in capsys.readouterr().err
    assert main(["scenario", "run", str(SCENARIO), "--kube-scheduler-patch", str(tmp_path / "missing.patch")]) == USAGE
    assert f"--kube-scheduler-patch {tmp_path / 'missing.patch'}: cannot read" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_scenario_run_passes_the_patched_build_and_the_release_first(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def run_scenarios(path: Path, schedulers: list[str] | None, *a: Any, **k: Any) -> Any:
        seen.update(schedulers=schedulers, builds=a[6], with_release=a[7])
        raise cli_scenarios.UsageError("seen")

    monkeypatch.setattr(cli_scenarios, "run_scenarios", run_scenarios)
    patch = tmp_path / "fix.patch"
    patch.write_text(PATCH)
    assert main(["scenario", "run", str(SCENARIO), "--scheduler", "kube-scheduler", "--kube-scheduler-patch",
                 str(patch), "--with-release"]) == USAGE  # the stand-in's UsageError
    assert seen == {"schedulers": ["kube-scheduler"], "builds": [Contender("kube-scheduler", patch=patch)],
                    "with_release": True}


def test_a_local_run_brings_up_the_plane_with_the_patch_for_its_scheduler_only(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opts: list[Any] = []

    class Plane:
        control_url, yunikorn_url, scheduler_build, scheduler_variant = "http://c", None, "b", "fix"
        feature_gates: dict[str, dict[str, bool]] = {}  # noqa: RUF012 (read only)

        def admin_api(self) -> object:
            return object()

    @contextmanager
    def running(o: Any) -> Iterator[Plane]:
        opts.append(o)
        yield Plane()

    monkeypatch.setattr(runner, "running", running)
    monkeypatch.setattr(runner, "run_on", lambda *a, **k: runner.RunResult("s", a[2], 1))
    scenario, patch = load_scenario(SCENARIO), tmp_path / "fix.patch"
    runner.run_local(scenario, "kube-scheduler", 1, tmp_path, tmp_path, say=False, patch=patch)
    runner.run_local(scenario, "yunikorn", 1, tmp_path, tmp_path, say=False, patch=patch)
    assert (opts[0].kube_scheduler_patch, opts[0].yunikorn_patch) == (patch, None)
    assert (opts[1].kube_scheduler_patch, opts[1].yunikorn_patch) == (None, patch)
