"""Feature gates per component: parsing `component:Gate=bool`, each binary's flag, the target a report names."""

from __future__ import annotations

from pathlib import Path

import pytest
from kube_fault_proxy.cli.main import parser
from kube_fault_proxy.rig.cluster import controller_manager, feature_gates
from kube_fault_proxy.rig.cluster.build import ALL
from kube_fault_proxy.rig.cluster.control_plane import Options, UsageError, _check_targets
from kube_fault_proxy.rig.cluster.schedulers import scheduler_build


@pytest.mark.parametrize(("text", "parsed"), [
    ("kube-scheduler:SchedulerAsyncAPICalls=true", ("kube-scheduler", "SchedulerAsyncAPICalls", True)),
    ("kube-controller-manager:StaleControllerConsistencyReplicaSet=false",
     ("kube-controller-manager", "StaleControllerConsistencyReplicaSet", False)),
    ("kube-apiserver:WatchList=TRUE", ("kube-apiserver", "WatchList", True)),
])
def test_a_setting_parses(text: str, parsed: tuple[str, str, bool]) -> None:
    assert feature_gates.parse(text) == parsed


@pytest.mark.parametrize(("text", "says"), [
    ("SchedulerAsyncAPICalls=true", "is not component:Gate=true|false"),
    ("kube-scheduler:SchedulerAsyncAPICalls", "is not component:Gate=true|false"),
    ("kubelet:Foo=true", "unknown component 'kubelet' (one of kube-apiserver, kube-controller-manager, kube-scheduler)"),
    ("kube-scheduler:foo=true", "'foo' is not a feature gate name"),
    ("kube-scheduler:Foo=yes", "'yes' is not true or false"),
])
def test_a_bad_setting_is_named(text: str, says: str) -> None:
    with pytest.raises(ValueError, match="^" + repr(text).replace("(", r"\(").replace(")", r"\)")) as e:
        feature_gates.parse(text)
    assert says in str(e.value)


def test_settings_collect_per_component_and_a_contradiction_is_an_error() -> None:
    gates = feature_gates.collect(["kube-scheduler:B=false", "kube-scheduler:A=true", "kube-apiserver:C=true",
                                   "kube-scheduler:A=true"])
    assert gates == {"kube-scheduler": {"B": False, "A": True}, "kube-apiserver": {"C": True}}
    assert feature_gates.flag(gates, "kube-scheduler") == ["--feature-gates=A=true,B=false"]
    assert feature_gates.flag(gates, "kube-controller-manager") == []
    assert feature_gates.target("kube-scheduler v1.36.3", gates, "kube-scheduler") == \
        "kube-scheduler v1.36.3 A=true B=false"
    assert feature_gates.target("kube-controller-manager v1.36.3", gates, "kube-controller-manager") == \
        "kube-controller-manager v1.36.3"
    with pytest.raises(ValueError, match="kube-scheduler:A is set both true and false"):
        feature_gates.collect(["kube-scheduler:A=true", "kube-scheduler:A=false"])


def test_the_scheduler_build_is_its_target() -> None:
    gates = {"kube-scheduler": {"SchedulerAsyncAPICalls": True}}
    version = ALL["kube-scheduler"].version
    assert scheduler_build("kube-scheduler", ALL, gates) == f"kube-scheduler {version} SchedulerAsyncAPICalls=true"
    assert scheduler_build("kube-scheduler", ALL) == f"kube-scheduler {version}"
    assert scheduler_build("none", ALL, gates) is None


def test_controller_manager_takes_its_gates_and_a_kubeconfig_through_the_proxy() -> None:
    argv = controller_manager.argv(Path("/kcm"), Path("via-proxy.kubeconfig"), Path("/pki"), 1234,
                                   controller_manager.WORKLOAD_CONTROLLERS,
                                   ["--feature-gates=StaleControllerConsistencyReplicaSet=false"],
                                   authentication_kubeconfig=Path("direct.kubeconfig"))
    assert "--kubeconfig=via-proxy.kubeconfig" in argv
    assert "--authentication-kubeconfig=direct.kubeconfig" in argv and "--authorization-kubeconfig=direct.kubeconfig" in argv
    assert argv[-1] == "--feature-gates=StaleControllerConsistencyReplicaSet=false"
    assert "--controllers=replicaset-controller,deployment-controller,job-controller,statefulset-controller," \
           "daemonset-controller" in argv
    assert "--v=2" in argv  # under test: its decisions logged with the replicas each acted on


def test_controller_manager_logs_at_its_default_level_when_no_workload_controller_runs() -> None:
    argv = controller_manager.argv(Path("/kcm"), Path("k"), Path("/pki"), 1234)
    assert not [a for a in argv if a.startswith("--v=")]


def test_which_clients_go_through_the_proxy(tmp_path: Path) -> None:
    assert Options(tmp_path, scheduler="kube-scheduler", proxy=True).proxied() == ("kube-scheduler",)
    assert Options(tmp_path, scheduler="kube-scheduler").proxied() == ()
    assert Options(tmp_path, scheduler="none", proxy=True).proxied() == ()
    kcm = Options(tmp_path, scheduler="kube-scheduler", proxy=True, through_proxy=("kube-controller-manager",))
    assert kcm.proxied() == ("kube-controller-manager",)


@pytest.mark.parametrize(("opts", "says"), [
    ({"feature_gates": {"kube-scheduler": {"A": True}}}, "feature gates for kube-scheduler need --scheduler"),
    ({"through_proxy": ("yunikorn",), "scheduler": "kube-scheduler"}, "--through-proxy yunikorn needs --scheduler"),
    ({"through_proxy": ("kubelet",)}, "--through-proxy 'kubelet': must be one of"),
])
def test_targets_that_are_not_started_are_usage_errors(tmp_path: Path, opts: dict[str, object], says: str) -> None:
    with pytest.raises(UsageError, match=says):
        _check_targets(Options(tmp_path, proxy=True, **opts))  # type: ignore[arg-type]


def test_cluster_up_and_scenario_run_take_feature_gates(capsys: pytest.CaptureFixture[str]) -> None:
    args = parser().parse_args(["cluster", "up", "--feature-gates", "kube-scheduler:SchedulerAsyncAPICalls=true",
                                "--feature-gates", "kube-controller-manager:StaleControllerConsistencyJob=false",
                                "--workload-controllers", "--through-proxy", "kube-controller-manager"])
    assert args.feature_gates == [("kube-scheduler", "SchedulerAsyncAPICalls", True),
                                  ("kube-controller-manager", "StaleControllerConsistencyJob", False)]
    assert args.through_proxy == ["kube-controller-manager"] and args.workload_controllers
    args = parser().parse_args(["scenario", "run", "tight-bind-fail", "--feature-gates", "kube-apiserver:X=false"])
    assert args.feature_gates == [("kube-apiserver", "X", False)]
    with pytest.raises(SystemExit):
        parser().parse_args(["cluster", "up", "--feature-gates", "kube-schedulr:X=true"])
    err = capsys.readouterr().err
    assert "argument --feature-gates: 'kube-schedulr:X=true': unknown component 'kube-schedulr'" in err
