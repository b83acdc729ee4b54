"""A kube-scheduler built from a patch: a copy of k8s.io/kubernetes at the release, patched, built through a
replace directive, keyed by the patch's bytes; the steps that run `go` are replaced by stand-ins."""

from __future__ import annotations

import hashlib
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.rig.cluster import build, versions

QUEUE_GO = textwrap.dedent("""\
    package queue

    func (p *PriorityQueue) requeue(pod *Pod) {
    \tp.activeQ.Add(pod)
    }
    """)
SKIP = textwrap.dedent("""\
    Planted: skip one requeue.

    --- a/pkg/scheduler/backend/queue/queue.go
    +++ b/pkg/scheduler/backend/queue/queue.go
    @@ -3,3 +3,3 @@
     func (p *PriorityQueue) requeue(pod *Pod) {
    -\tp.activeQ.Add(pod)
    +\t_ = pod
     }
    """)
QUEUE = "pkg/scheduler/backend/queue/queue.go"


class FakeGo(build.Toolchain):
    """`go mod download` answers with a fake k8s.io/kubernetes; `go build` writes a stand-in binary."""

    def __init__(self, pristine: Path) -> None:
        self.pristine = pristine
        self.compiled: list[tuple[str, str]] = []  # (version, the queue source it compiled)

    def module_dir(self, module: str, version: str, env: dict[str, str], workdir: Path) -> Path:
        assert (module, version) == ("k8s.io/kubernetes", versions.KUBERNETES)
        return self.pristine

    def compile(self, c: build.Component, moddir: Path, out: Path, env: dict[str, str],
                note: Callable[[str], None]) -> None:
        self.compiled.append((c.version, (moddir / build.K8S_COPY / QUEUE).read_text()))
        out.write_bytes(b"ELF " + c.version.encode())


@pytest.fixture
def go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeGo:
    monkeypatch.setenv("KFP_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "modcache" / f"kubernetes@{versions.KUBERNETES}"
    (root / QUEUE).parent.mkdir(parents=True)
    (root / "go.mod").write_text("module k8s.io/kubernetes\n")
    (root / QUEUE).write_text(QUEUE_GO)
    for p in sorted(root.rglob("*"), reverse=True):  # read-only, as Go's module cache is
        p.chmod(0o555 if p.is_dir() else 0o444)
    return FakeGo(root)


def test_a_patched_kube_scheduler_is_its_release_plus_the_patch_keyed_by_its_bytes(tmp_path: Path, go: FakeGo) -> None:
    patch = tmp_path / "skip-requeue.patch"
    patch.write_text(SKIP)
    c = build.kube_scheduler(patch)
    key = hashlib.sha256(SKIP.encode()).hexdigest()[:12]
    assert c.version == f"{versions.KUBERNETES}+skip-requeue-{key}" and c.release == versions.KUBERNETES
    assert c.package == "k8s.io/kubernetes/cmd/kube-scheduler" and c.variant == "skip-requeue"
    assert c.ldflags == build.kubernetes("kube-scheduler").ldflags  # it calls itself the release it patches
    binary = build.build(c, say=False, go=go)
    assert binary.read_bytes() == f"ELF {c.version}".encode()
    assert go.compiled == [(c.version, QUEUE_GO.replace("p.activeQ.Add(pod)", "_ = pod"))]
    assert (go.pristine / QUEUE).read_text() == QUEUE_GO  # the module cache's copy is never touched
    assert build.build(build.kube_scheduler(patch), say=False, go=go) == binary and len(go.compiled) == 1
    assert build.ALL["kube-scheduler"].binary != binary  # the released binary stays as it is


def test_a_kube_scheduler_patch_that_does_not_apply_names_the_release_and_caches_nothing(tmp_path: Path,
                                                                                        go: FakeGo) -> None:
    patch = tmp_path / "stale.patch"
    patch.write_text(SKIP.replace("p.activeQ.Add(pod)", "p.activeQ.AddOrUpdate(pod)"))
    with pytest.raises(build.BuildInputError, match=rf"does not apply: .* \(against k8s.io/kubernetes@"
                                                     rf"{versions.KUBERNETES}\)"):
        build.build(build.kube_scheduler(patch), say=False, go=go)
    assert go.compiled == [] and not list((tmp_path / "cache" / "build").iterdir())


def test_our_module_replaces_k8s_io_kubernetes_by_the_patched_copy(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    gomod = tmp_path / "k8s.mod"
    gomod.write_text("module k8s.io/kubernetes\n\ngo 1.26.0\n\nrequire k8s.io/api v0.0.0\n\n"
                     "replace k8s.io/api => ./staging/src/k8s.io/api\n")
    asked: list[tuple[str, str]] = []

    def download(module: str, version: str, env: dict[str, str], workdir: Path) -> dict[str, Any]:
        asked.append((module, version))
        return {"GoMod": str(gomod), "Dir": str(tmp_path)}

    monkeypatch.setattr(build, "_download", download)
    monkeypatch.setattr(build, "_go", lambda args, cwd, env: "")
    patch = tmp_path / "p.patch"
    patch.write_text(SKIP)
    c = build.kube_scheduler(patch, "v1.36.3")
    build._prepare(c, tmp_path / "mod", {})
    text = (tmp_path / "mod" / "go.mod").read_text()
    assert asked == [("k8s.io/kubernetes", "v1.36.3")]  # the release's module, not the patched version string
    assert "require k8s.io/kubernetes v1.36.3" in text and "k8s.io/api => k8s.io/api v0.36.3" in text
    assert text.rstrip().endswith(f"replace k8s.io/kubernetes => ./{build.K8S_COPY}")


def test_the_build_command_builds_a_patched_kube_scheduler_named_alone(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from kube_fault_proxy.cli.main import main

    patch = tmp_path / "p.patch"
    patch.write_text(SKIP)
    built: list[tuple[list[str], build.Component]] = []

    def build_all(names: list[str], say: bool = True,
                  overrides: dict[str, build.Component] | None = None) -> dict[str, Path]:
        assert overrides is not None
        built.append((names, overrides["kube-scheduler"]))
        return {n: Path("/bin") / n for n in names}

    monkeypatch.setattr(build, "build_all", build_all)
    assert main(["cluster", "build", "kube-scheduler", "--patch", str(patch), "--kubernetes", "v1.36.3"]) == 0
    assert built[0][0] == ["kube-scheduler"] and built[0][1].version.startswith("v1.36.3+p-")
    assert built[0][1].k8s_patch == patch.resolve()
    assert main(["cluster", "build", "kube-scheduler", "--source", str(tmp_path)]) == 2
    assert "--source yunikorn only" in capsys.readouterr().err


def test_a_control_plane_takes_a_kube_scheduler_patch_only_for_kube_scheduler(tmp_path: Path) -> None:
    from kube_fault_proxy.rig.cluster.control_plane import Options, up

    with pytest.raises(build.BuildInputError, match="--kube-scheduler-patch needs --scheduler kube-scheduler"):
        up(Options(state_dir=tmp_path / "c", scheduler="yunikorn", kube_scheduler_patch=tmp_path / "x.patch"))
    assert not (tmp_path / "c").exists()  # refused before anything started


def test_cluster_up_takes_a_kube_scheduler_patch_and_refuses_a_file_that_is_no_patch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from kube_fault_proxy.cli import cluster
    from kube_fault_proxy.cli.main import main
    from kube_fault_proxy.rig.cluster.control_plane import Options

    asked: list[Options] = []

    class Started(Exception):
        pass

    def up(opts: Options) -> None:
        asked.append(opts)
        raise Started

    monkeypatch.setattr(cluster, "up", up)
    patch = tmp_path / "p.patch"
    patch.write_text(SKIP)
    with pytest.raises(Started):
        main(["cluster", "--state-dir", str(tmp_path / "c"), "up", "--scheduler", "kube-scheduler",
              "--kube-scheduler-patch", str(patch)])
    assert asked[0].kube_scheduler_patch == patch and asked[0].scheduler == "kube-scheduler"
    prose = tmp_path / "notes.txt"
    prose.write_text("no hunks here\n")
    assert main(["cluster", "--state-dir", str(tmp_path / "c"), "up", "--scheduler", "kube-scheduler",
                 "--kube-scheduler-patch", str(prose)]) == 2
    assert f"--kube-scheduler-patch {prose}: not a patch" in capsys.readouterr().err
    assert len(asked) == 1  # refused before anything started


def test_a_control_plane_builds_the_patched_kube_scheduler_under_its_own_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kube_fault_proxy.rig.cluster.control_plane import Options, up

    patch = tmp_path / "p.patch"
    patch.write_text(SKIP)
    asked: list[build.Component] = []

    class Built(Exception):
        pass

    def build_all(names: list[str], say: bool = True,
                  overrides: dict[str, build.Component] | None = None) -> dict[str, Path]:
        assert overrides is not None and "kube-scheduler" in names
        asked.append(overrides["kube-scheduler"])
        raise Built

    monkeypatch.setattr(build, "build_all", build_all)
    with pytest.raises(Built):
        up(Options(state_dir=tmp_path / "c", scheduler="kube-scheduler", kube_scheduler_patch=patch))
    assert asked[0] == build.kube_scheduler(patch) and asked[0].version.startswith(f"{versions.KUBERNETES}+p-")
    assert asked[0].binary != build.ALL["kube-scheduler"].binary  # never the released binary's place


@pytest.mark.parametrize(("scheduler", "given"), [("kube-scheduler", True), ("yunikorn", False),
                                                  ("kube-controller-manager", False)])
def test_a_search_rig_runs_a_patched_kube_scheduler_only_when_it_is_the_target(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, scheduler: str, given: bool) -> None:
    from kube_fault_proxy.rig.search import trial

    from tests.support.rig_options import captured_options

    seen = captured_options(monkeypatch)
    patch = tmp_path / "p.patch"
    with trial.Rig.running(tmp_path, scheduler, 3, tmp_path, kube_scheduler_patch=patch):
        pass
    assert seen[0].kube_scheduler_patch == (patch if given else None) and seen[0].yunikorn_patch is None
