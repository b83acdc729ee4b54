"""Builds per Kubernetes release: which version each command line selects, the Go toolchain each release's
`go` commands get (GOTOOLCHAIN only for v1.38), where each release's binaries live, and each release's
feature gates read from Go source. Nothing here runs `go`: the subprocess calls are recorded instead."""

from __future__ import annotations

import json
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.cli import cluster as cluster_cli
from kube_fault_proxy.cli.main import parser
from kube_fault_proxy.rig import pytest_plugin
from kube_fault_proxy.rig.cluster import build, feature_gates, versions
from kube_fault_proxy.rig.cluster.control_plane import Options, UsageError, up
from kube_fault_proxy.rig.search.job_manifest import worker_args
from kube_fault_proxy.rig.search.outcome import Settings

GO_MOD = textwrap.dedent("""\
    module k8s.io/kubernetes

    go 1.27.0

    godebug default=go1.27

    require (
    \tk8s.io/api v0.0.0
    \tk8s.io/client-go v0.0.0
    )

    replace (
    \tk8s.io/api => ./staging/src/k8s.io/api
    \tk8s.io/client-go => ./staging/src/k8s.io/client-go
    )
    """)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KFP_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("GOTOOLCHAIN", raising=False)
    return tmp_path / "cache"


def test_the_releases_served_here_and_their_lines() -> None:
    assert versions.RELEASES == ("v1.36.3", "v1.37.2", "v1.38.0-beta.0")
    assert versions.KUBERNETES == "v1.37.2"  # the newest stable release served (issue 44); it moves by decision
    assert [versions.line(v).etcd for v in versions.RELEASES] == ["v3.6.16", "v3.7.0", "v3.7.1"]
    assert [versions.line(v).toolchain for v in versions.RELEASES] == [None, None, "go1.27.3"]
    assert versions.line("v1.38.0") == versions.line("v1.38.4") == versions.line("v1.38.0-rc.1")  # later patches
    assert versions.ETCD == "v3.7.0"  # the default release's


@pytest.mark.parametrize(("version", "message"), [
    ("1.37.2", "is not v1.MINOR.PATCH"),
    ("v1.37", "is not v1.MINOR.PATCH"),
    ("v1.37.2-foo.1", "is not v1.MINOR.PATCH"),
    ("v1.35.0", "the rig builds v1.36, v1.37, v1.38"),
    ("v1.39.0", "served here: v1.36.3, v1.37.2, v1.38.0-beta.0"),
])
def test_a_release_the_rig_does_not_build_is_refused(version: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as e:
        versions.line(version)
    assert repr(version) in str(e.value)
    with pytest.raises(build.BuildInputError, match=message):
        build.kubernetes("kube-scheduler", version)


def test_each_release_lives_beside_the_others_in_the_cache(cache: Path) -> None:
    binaries = {v: build.kubernetes("kube-scheduler", v).binary for v in versions.RELEASES}
    assert binaries == {v: cache / "bin" / f"kube-scheduler-{v}" / "kube-scheduler" for v in versions.RELEASES}
    etcds = {v: build.etcd(v).binary for v in versions.RELEASES}
    assert etcds["v1.37.2"] == cache / "bin" / "etcd-v3.7.0" / "etcd"
    assert etcds["v1.38.0-beta.0"] == cache / "bin" / "etcd-v3.7.1" / "etcd"
    assert len(set(etcds.values())) == 3


def test_only_v1_38_builds_with_go_1_27() -> None:
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kubelet"):
        assert build.kubernetes(name, "v1.38.0-beta.0").env == {"GOTOOLCHAIN": "go1.27.3"}
        assert build.kubernetes(name, "v1.38.2").env == {"GOTOOLCHAIN": "go1.27.3"}
        assert build.kubernetes(name, "v1.37.2").env == {}
        assert build.kubernetes(name, "v1.36.3").env == {}
    assert all(build.etcd(v).env == {} for v in versions.RELEASES)  # etcd v3.7's go.mod says go 1.26


def test_components_of_a_release() -> None:
    got = build.components("v1.37.2")
    assert set(got) == set(build.ALL)
    assert {n: got[n].version for n in build.RELEASE_COMPONENTS} == {
        "kube-apiserver": "v1.37.2", "kube-controller-manager": "v1.37.2", "kube-scheduler": "v1.37.2",
        "kubectl": "v1.37.2", "kubelet": "v1.37.2", "etcd": "v3.7.0"}
    assert got["kwok"] == build.ALL["kwok"] and got["yunikorn-scheduler"] == build.ALL["yunikorn-scheduler"]
    assert "-X k8s.io/component-base/version.gitVersion=v1.38.0-beta.0" in build.kubernetes(
        "kube-scheduler", "v1.38.0-beta.0").ldflags
    assert "-X k8s.io/component-base/version.gitMinor=38" in build.kubernetes("kubectl", "v1.38.0-beta.0").ldflags
    assert build.ALL["kube-scheduler"].version == versions.KUBERNETES


class RecordedGo:
    """Stands in for subprocess.run and subprocess.Popen in build.py: records each `go` command line with the
    GOTOOLCHAIN it got, answers `go mod download -json` with a module of ours, and `go build` with a file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.calls: list[tuple[list[str], str | None]] = []
        (root / "src").mkdir(parents=True)
        (root / "go.mod").write_text(GO_MOD)

    def run(self, argv: list[str], cwd: Path, env: dict[str, str], **_: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append((argv, env.get("GOTOOLCHAIN")))
        out = ""
        if argv[1:3] == ["mod", "download"]:
            out = json.dumps({"Dir": str(self.root / "src"), "GoMod": str(self.root / "go.mod")})
        elif argv[1:3] == ["list", "-deps"]:
            out = "k8s.io/a\nk8s.io/b\n"
        return subprocess.CompletedProcess(argv, 0, out, "")

    def popen(self, argv: list[str], cwd: Path, env: dict[str, str], **_: Any) -> Any:
        self.calls.append((argv, env.get("GOTOOLCHAIN")))
        Path(argv[argv.index("-o") + 1]).write_bytes(b"ELF")

        class Done:
            stderr: Iterator[str] = iter(["k8s.io/a\n", "k8s.io/b\n"])

            def wait(self) -> int:
                return 0
        return Done()


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: Path) -> RecordedGo:
    go = RecordedGo(tmp_path / "module")
    monkeypatch.setattr(build.subprocess, "run", go.run)
    monkeypatch.setattr(build.subprocess, "Popen", go.popen)
    monkeypatch.setattr(build.shutil, "which", lambda _: "/usr/bin/go")
    return go


@pytest.mark.parametrize(("version", "toolchain"), [("v1.38.0-beta.0", "go1.27.3"), ("v1.37.2", None),
                                                     ("v1.36.3", None)])
def test_the_go_command_lines_of_a_release_build(recorded: RecordedGo, cache: Path, version: str,
                                                 toolchain: str | None) -> None:
    path = build.build(build.kubernetes("kube-scheduler", version), say=False)
    assert path == cache / "bin" / f"kube-scheduler-{version}" / "kube-scheduler" and path.read_bytes() == b"ELF"
    argvs = [argv for argv, _ in recorded.calls]
    assert argvs[0] == ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{version}"]
    assert argvs[1] == ["go", "mod", "tidy"]
    assert argvs[2] == ["go", "list", "-deps", "k8s.io/kubernetes/cmd/kube-scheduler"]
    assert argvs[3][:4] == ["go", "build", "-v", "-trimpath"]
    assert argvs[3][-3:] == ["-o", str(path.with_suffix(".partial")), "k8s.io/kubernetes/cmd/kube-scheduler"]
    assert f"-X k8s.io/component-base/version.gitVersion={version}" in argvs[3][argvs[3].index("-ldflags") + 1]
    assert [t for _, t in recorded.calls] == [toolchain] * 4  # every go command of the build, no other
    gomod = (cache / "build" / f"kube-scheduler-{version}" / "go.mod").read_text()
    twin = "v0." + version.removeprefix("v1.")
    assert f"require k8s.io/kubernetes {version}" in gomod and f"k8s.io/api => k8s.io/api {twin}" in gomod


def test_cluster_build_builds_the_asked_release(recorded: RecordedGo, cache: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    args = parser().parse_args(["cluster", "build", "--kubernetes", "v1.38.0-beta.0", "kube-scheduler", "etcd"])
    assert cluster_cli.run(args) == 0
    out = capsys.readouterr().out
    assert f"kube-scheduler: {cache}/bin/kube-scheduler-v1.38.0-beta.0/kube-scheduler" in out
    assert f"etcd: {cache}/bin/etcd-v3.7.1/etcd" in out
    downloads = [(argv[-1], t) for argv, t in recorded.calls if argv[1:3] == ["mod", "download"]]
    assert downloads == [("k8s.io/kubernetes@v1.38.0-beta.0", "go1.27.3")]  # etcd's module file needs no download
    etcd_build = [t for argv, t in recorded.calls if argv[-1] == "go.etcd.io/etcd/server/v3"]
    assert etcd_build == [None, None]  # go list, go build: etcd with the machine's own Go


@pytest.mark.parametrize("argv", [
    ["cluster", "up"], ["cluster", "build"], ["scenario", "run", "yunikorn-3355"], ["demo"],
    ["search", "--target", "kube-scheduler"],
])
def test_every_command_that_takes_a_build_takes_a_release(argv: list[str]) -> None:
    assert parser().parse_args(argv).kubernetes == versions.KUBERNETES
    assert parser().parse_args([*argv, "--kubernetes", "v1.37.2"]).kubernetes == "v1.37.2"


def test_a_bad_release_on_the_command_line_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        parser().parse_args(["cluster", "up", "--kubernetes", "v1.35.1"])
    assert e.value.code == 2
    assert "argument --kubernetes: Kubernetes version 'v1.35.1'" in capsys.readouterr().err


def test_the_plugin_setting_is_checked() -> None:
    assert pytest_plugin._kubernetes("v1.37.2") == "v1.37.2"
    assert pytest_plugin._kubernetes("") is None
    with pytest.raises(pytest.UsageError, match=r"kube-fault-proxy kubernetes: Kubernetes version 'v2\.0\.0'"):
        pytest_plugin._kubernetes("v2.0.0")


def test_a_search_worker_runs_the_searchs_release(tmp_path: Path) -> None:
    def settings(release: str) -> Settings:
        return Settings(scheduler="kube-scheduler", control=None, budget=60.0, seed=1, kinds=("delay",),
                        out=tmp_path, state_dir=tmp_path, profiles_dir=tmp_path, kubernetes=release)

    assert worker_args(settings("v1.38.0-beta.0"))[-2:] == ["--kubernetes", "v1.38.0-beta.0"]
    assert "--kubernetes" not in worker_args(settings(versions.KUBERNETES))


KUBE_FEATURES = textwrap.dedent("""\
    package features

    const (
    \t// owner: @someone
    \tSchedulerAsyncAPICalls featuregate.Feature = "SchedulerAsyncAPICalls"

    \tReloadKubeletClientCAFile = "ReloadKubeletClientCAFile"

    \tSystemdWatchdog = featuregate.Feature("SystemdWatchdog")

    \tNotRegistered featuregate.Feature = "NotRegistered"
    )

    var defaultVersionedKubernetesFeatureGates = map[featuregate.Feature]featuregate.VersionedSpecs{
    \tReloadKubeletClientCAFile: {
    \t\t{Version: version.MustParse("1.36"), Default: true, PreRelease: featuregate.Beta},
    \t},

    \tSchedulerAsyncAPICalls: {
    \t\t{Version: version.MustParse("1.34"), Default: false, PreRelease: featuregate.Beta},
    \t},

    \tSystemdWatchdog: {
    \t\t{Version: version.MustParse("1.32"), Default: true, PreRelease: featuregate.Beta},
    \t},

    \tgenericfeatures.WatchList: {
    \t\t{Version: version.MustParse("1.32"), Default: true, PreRelease: featuregate.Beta},
    \t},
    }

    var defaultKubernetesFeatureGateDependencies = map[featuregate.Feature][]featuregate.Feature{
    \tOutsideTheRegistry: {},
    }
    """)
CLIENT_FEATURES = textwrap.dedent("""\
    const (
    \t// MyFeature featuregate.Feature = "MyFeature"
    \tAtomicFIFO Feature = "AtomicFIFO"
    \tnotAGate = "notAGate"
    )
    """)


def test_a_releases_gates_are_read_from_its_registry(tmp_path: Path) -> None:
    assert feature_gates.registered(KUBE_FEATURES) == {
        "ReloadKubeletClientCAFile", "SchedulerAsyncAPICalls", "SystemdWatchdog", "WatchList"}
    kube = tmp_path / "kube_features.go"
    kube.write_text(KUBE_FEATURES)
    client = tmp_path / "known_features.go"
    client.write_text(CLIENT_FEATURES)
    names = feature_gates.known(kube, [client])
    assert names == {"ReloadKubeletClientCAFile", "SchedulerAsyncAPICalls", "SystemdWatchdog", "WatchList",
                     "AtomicFIFO"}  # neither the commented example nor an untyped string of another file
    feature_gates.check({"kube-scheduler": {"SchedulerAsyncAPICalls": True}}, "v1.37.2", names)
    with pytest.raises(ValueError, match=r"Kubernetes v1\.37\.2 has no feature gate kube-apiserver:NotRegistered, "
                                         r"kube-scheduler:Nope \(5 gates read from its source"):
        feature_gates.check({"kube-scheduler": {"Nope": False, "AtomicFIFO": True},
                             "kube-apiserver": {"NotRegistered": True}}, "v1.37.2", names)


def test_a_registry_the_reader_does_not_understand_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"x\.go: no `var defaultVersionedKubernetesFeatureGates"):
        feature_gates.registered("package features\n", "x.go")
    undeclared = KUBE_FEATURES.replace('\tSystemdWatchdog = featuregate.Feature("SystemdWatchdog")\n', "")
    with pytest.raises(ValueError, match=r"x\.go:\d+: defaultVersionedKubernetesFeatureGates registers "
                                         r"SystemdWatchdog, which the file does not declare"):
        feature_gates.registered(undeclared, "x.go")


class SourceGo(build.Toolchain):
    """`go mod download` of a release and its staging modules answers with directories of ours."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.asked: list[tuple[str, str, str | None]] = []
        for rel, text in (("kubernetes/pkg/features/kube_features.go", KUBE_FEATURES),
                          ("client-go/features/known_features.go", CLIENT_FEATURES),
                          ("component-base/logs/api/v1/kube_features.go",
                           '\tContextualLogging featuregate.Feature = "ContextualLogging"\n'),
                          ("component-base/featuregate/feature_gate.go", '\tallAlphaGate Feature = "AllAlpha"\n')):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)

    def module_dir(self, module: str, version: str, env: dict[str, str], workdir: Path) -> Path:
        self.asked.append((module, version, env.get("GOTOOLCHAIN")))
        return self.root / module.removeprefix("k8s.io/")


def test_known_gates_reads_the_release_and_its_staging_modules(tmp_path: Path, cache: Path) -> None:
    go = SourceGo(tmp_path / "mods")
    names = build.known_gates("v1.38.0-beta.0", go)
    assert {"SchedulerAsyncAPICalls", "WatchList", "AtomicFIFO", "ContextualLogging", "AllAlpha"} <= names
    assert go.asked == [("k8s.io/kubernetes", "v1.38.0-beta.0", "go1.27.3"),
                        ("k8s.io/client-go", "v0.38.0-beta.0", "go1.27.3"),
                        ("k8s.io/component-base", "v0.38.0-beta.0", "go1.27.3"),
                        ("k8s.io/component-base", "v0.38.0-beta.0", "go1.27.3")]
    assert build.gates_file("v1.38.0-beta.0").read_text().split() == sorted(names)
    go.asked.clear()
    assert build.known_gates("v1.38.0-beta.0", go) == names and go.asked == []  # kept: read once
    build.known_gates("v1.37.2", go)
    assert {t for _, _, t in go.asked} == {None}


def test_without_go_and_never_read_the_gates_are_unknown(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build.shutil, "which", lambda _: None)
    assert build.known_gates("v1.37.2") is None
    build.gates_file("v1.37.2").parent.mkdir(parents=True)
    build.gates_file("v1.37.2").write_text("AtomicFIFO\nSchedulerAsyncAPICalls\n")
    assert build.known_gates("v1.37.2") == {"AtomicFIFO", "SchedulerAsyncAPICalls"}


def test_up_refuses_a_gate_the_release_lacks_before_building(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             cache: Path) -> None:
    asked: list[str] = []

    def known(version: str) -> frozenset[str] | None:
        asked.append(version)
        return frozenset({"SchedulerAsyncAPICalls"})

    def no_build(*_: Any, **__: Any) -> Any:
        raise AssertionError("built before the gates were checked")

    monkeypatch.setattr(build, "known_gates", known)
    monkeypatch.setattr(build, "build_all", no_build)
    opts = Options(state_dir=tmp_path / "c", scheduler="kube-scheduler", kubernetes="v1.37.2",
                   feature_gates={"kube-scheduler": {"SchedulerPreQueueingHints": True}})
    with pytest.raises(UsageError, match=r"Kubernetes v1\.37\.2 has no feature gate "
                                         r"kube-scheduler:SchedulerPreQueueingHints"):
        up(opts)
    assert asked == ["v1.37.2"]
