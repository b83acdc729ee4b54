"""spec.freshScheduler: a scenario whose every run starts with the scheduler under test restarted (the rig's own
restart, rig.cluster.schedulers.restart_scheduler), on a run's own control plane or on one `cluster up` brought up
and reached with its kubeconfig; refused, naming the field, on a cluster whose scheduler the rig cannot restart."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.cli import scenarios as cli_scenarios
from kube_fault_proxy.cli.exits import USAGE
from kube_fault_proxy.cli.main import main
from kube_fault_proxy.proxy.profiles.loader import ProfileError
from kube_fault_proxy.rig.cluster.record import Cluster
from kube_fault_proxy.rig.cluster.state import ProcessRecord, ProxyRecord
from kube_fault_proxy.rig.runs import runner
from kube_fault_proxy.rig.runs.run_record import Target, local_plane
from kube_fault_proxy.rig.runs.scenario import Scenario, load_scenario

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "scenarios" / "yunikorn-3374-outage-then-flap.yaml"
KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def _scenario(fresh: bool = True) -> Scenario:
    return Scenario.model_validate({"apiVersion": "kube-fault-proxy/v1", "kind": "Scenario",
                                    "metadata": {"name": "s"},
                                    "spec": {"load": {"count": 3}, "freshScheduler": fresh,
                                             "expect": {"yunikorn": {"verdict": "clean"}}}})


def _plane(tmp_path: Path, scheduler: str = "yunikorn", running: bool = True) -> tuple[Cluster, Path]:
    """A local control plane's record as `cluster up --proxy` leaves it (no process of it runs here)."""
    state_dir = tmp_path / "plane"
    c = Cluster(state_dir)
    kubeconfig = state_dir / "kubeconfigs" / "admin.kubeconfig"
    kubeconfig.parent.mkdir(parents=True)
    kubeconfig.write_text(KUBECONFIG)
    c.state.scheduler = scheduler
    c.state.scheduler_build = f"{scheduler} v1.9.0"
    c.state.kubeconfigs = {"admin": str(kubeconfig)}
    c.state.proxy = ProxyRecord(url="https://127.0.0.1:2", control="http://127.0.0.1:3", ca_file="ca.crt")
    c.state.yunikorn = "http://127.0.0.1:9080" if scheduler == "yunikorn" else None
    if running:
        c.state.processes = {"kube-apiserver": ProcessRecord(pid=100, log="a.log"),
                             scheduler: ProcessRecord(pid=200, log="s.log")}
    c.save()
    return Cluster(state_dir), kubeconfig


def _restart_recorder(calls: list[str]) -> Any:
    def restart(c: Cluster, timeout: float = 120.0) -> float:
        """What restart_scheduler leaves in the record: the scheduler under a new pid."""
        calls.append(c.scheduler)
        c.state.processes[c.scheduler] = ProcessRecord(pid=201, log="s.log")
        return 1.25
    return restart


def test_the_field_defaults_off_and_the_shipped_scenario_sets_it() -> None:
    assert _scenario(fresh=False).spec.freshScheduler is False
    assert Scenario.model_validate({"apiVersion": "kube-fault-proxy/v1", "kind": "Scenario",
                                    "metadata": {"name": "s"}, "spec": {}}).spec.freshScheduler is False
    s = load_scenario(SHIPPED)
    assert s.spec.freshScheduler is True
    assert (s.spec.cluster.nodes, s.spec.load.count) == (20, 50)
    assert s.spec.timeline[0].activate == "bind-outage-1s-at-bind-20"
    flap = s.spec.timeline[1]
    assert flap.onEvent == "inject" and flap.after == 2.0
    assert flap.flapNode is not None and (flap.flapNode.node, flap.flapNode.downSeconds) == ("held", 0.5)
    assert s.spec.settle.quiet == 25.0  # the control's bind retry backoff: 10 s was too short
    assert "I2" in s.spec.expect["yunikorn"].invariants
    assert s.spec.expect["kube-scheduler"].verdict == "clean"


def test_the_field_is_strict(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("apiVersion: kube-fault-proxy/v1\nkind: Scenario\nmetadata: {name: s}\nspec:\n"
                 "  freshScheduler: sometimes\n")
    with pytest.raises(ProfileError, match=r"s.yaml:5:19: spec.freshScheduler: Input should be a valid boolean"):
        load_scenario(f)


def test_a_cluster_the_rig_did_not_bring_up_is_refused_naming_the_field() -> None:
    foreign = Target(object(), "http://127.0.0.1:1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^spec.freshScheduler restarts the scheduler under test before each run"):
        runner.check_fresh(_scenario(), foreign)
    runner.check_fresh(_scenario(fresh=False), foreign)  # nothing to restart: fine
    runner.check_fresh(_scenario(), None)  # a run's own control plane: fine


def test_the_restart_is_the_rigs_and_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(runner, "restart_scheduler", _restart_recorder(calls))
    c, _ = _plane(tmp_path)
    target = Target(object(), "http://127.0.0.1:1", None, c)  # type: ignore[arg-type]
    fresh = runner.fresh_scheduler(target, _scenario(), say=False)
    assert calls == ["yunikorn"]
    assert fresh == {"restarted": True, "how": "yunikorn restarted before the run", "seconds": 1.25,
                     "oldPid": 200, "pid": 201}
    # the run's own control plane has just started it: fresh already, not restarted again
    assert runner.fresh_scheduler(target, _scenario(), say=False, started=True) == {
        "restarted": False, "how": "started with the run's own control plane", "pid": 201}
    assert runner.fresh_scheduler(target, _scenario(fresh=False), say=False) is None
    assert calls == ["yunikorn"]


class _Stop(Exception):
    """Ends a run where the test has seen what it needs (before anything would reach a socket)."""


def test_a_run_restarts_the_scheduler_before_its_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(runner, "restart_scheduler", _restart_recorder(calls))

    def sampler(*a: Any, **k: Any) -> None:
        calls.append("sampler")
        raise _Stop

    monkeypatch.setattr(runner, "Sampler", sampler)
    c, _ = _plane(tmp_path)
    with pytest.raises(_Stop):
        runner.run_on(Target(object(), "http://127.0.0.1:1", None, c), _scenario(), "yunikorn", 1,  # type: ignore[arg-type]
                      say=False)
    assert calls == ["yunikorn", "sampler"]  # restarted, then the run's sampling (and its load) began
    calls.clear()
    with pytest.raises(ValueError, match=r"^spec\.freshScheduler"):  # refused before anything of the run
        runner.run_on(Target(object(), "http://127.0.0.1:1"), _scenario(), "yunikorn", 1,  # type: ignore[arg-type]
                      say=False)
    assert calls == []


def test_a_local_planes_kubeconfig_brings_the_plane(tmp_path: Path) -> None:
    c, kubeconfig = _plane(tmp_path)
    plane = local_plane(kubeconfig)
    assert plane is not None and plane.dir == c.dir
    other = tmp_path / "other.kubeconfig"
    other.write_text(KUBECONFIG)
    assert local_plane(other) is None  # no cluster.json beside it: a foreign cluster's
    stray = c.dir / "kubeconfigs" / "stray.kubeconfig"
    stray.write_text(KUBECONFIG)
    assert local_plane(stray) is None  # in the state dir, but not one `up` wrote
    _, down = _plane(tmp_path / "down", running=False)
    assert local_plane(down) is None  # brought down: nothing to restart


def test_scenario_run_refuses_a_foreign_kubeconfig(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    foreign = tmp_path / "foreign.kubeconfig"
    foreign.write_text(KUBECONFIG)
    code = main(["scenario", "run", str(SHIPPED), "--kubeconfig", str(foreign), "--control-url",
                 "http://127.0.0.1:1", "--scheduler", "yunikorn", "-o", str(tmp_path / "out")])
    assert code == USAGE
    err = capsys.readouterr().err
    assert "spec.freshScheduler restarts the scheduler under test before each run" in err
    assert not (tmp_path / "out").exists()


def test_scenario_run_on_a_local_plane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def run_scenarios(path: Path, schedulers: list[str] | None, *a: Any, **k: Any) -> Any:
        seen.update(schedulers=schedulers, existing=a[5])
        raise cli_scenarios.UsageError("seen")

    monkeypatch.setattr(cli_scenarios, "run_scenarios", run_scenarios)
    c, kubeconfig = _plane(tmp_path)
    assert main(["scenario", "run", str(SHIPPED), "--kubeconfig", str(kubeconfig)]) == USAGE
    target = seen["existing"]
    assert seen["schedulers"] == ["yunikorn"]  # the plane's, by default
    assert target.cluster is not None and target.cluster.dir == c.dir
    assert (target.control, target.yunikorn) == ("http://127.0.0.1:3", "http://127.0.0.1:9080")
    # another scheduler than the plane runs: the one under test is not the rig's to restart
    assert main(["scenario", "run", str(SHIPPED), "--kubeconfig", str(kubeconfig), "--scheduler",
                 "kube-scheduler"]) == USAGE
    assert seen["existing"].cluster is None and seen["schedulers"] == ["kube-scheduler"]


def test_a_runs_own_control_plane_is_not_restarted_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    class Plane:
        control_url, yunikorn_url, scheduler_build, scheduler_variant = "http://c", None, "yunikorn v1.9.0", None
        def __init__(self) -> None:
            self.feature_gates: dict[str, dict[str, bool]] = {}

        def admin_api(self) -> object:
            return object()

    @contextmanager
    def running(opts: Any) -> Iterator[Plane]:
        yield Plane()

    def run_on(target: Target, *a: Any, **k: Any) -> runner.RunResult:
        seen.update(k, cluster=target.cluster)
        return runner.RunResult("s", "yunikorn", 1)

    monkeypatch.setattr(runner, "running", running)
    monkeypatch.setattr(runner, "run_on", run_on)
    runner.run_local(_scenario(), "yunikorn", 1, tmp_path, tmp_path, say=False)
    assert seen["started"] is True and isinstance(seen["cluster"], Plane)


def test_the_restart_comes_first_in_the_runs_steps_and_is_an_event() -> None:
    result = runner.RunResult("s", "yunikorn", 1)
    result.steps.append({"t": 0.1, "did": "activate p (seed 1)"})  # the timeline begins with the sampler
    result.freshScheduler = {"restarted": True, "how": "yunikorn restarted before the run", "seconds": 1.25,
                             "oldPid": 200, "pid": 201}

    class Sampler:
        events: list[dict[str, Any]]

    sampler = Sampler()
    sampler.events = []
    runner._note_fresh(result, sampler)  # type: ignore[arg-type]
    assert [s["did"] for s in result.steps] == [
        "fresh scheduler: yunikorn restarted before the run in 1.25s (pid 201)", "activate p (seed 1)"]
    assert sampler.events == [{"t": 0.0, "event": "scheduler-fresh", **result.freshScheduler}]
