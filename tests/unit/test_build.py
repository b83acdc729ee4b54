"""Builds of YuniKorn from a patch or a source tree: the cache key, what a failure leaves behind
(nothing), and our module file; the steps that run `go` are replaced by a stand-in."""

from __future__ import annotations

import hashlib
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from kube_fault_proxy.rig.cluster import build, versions
from kube_fault_proxy.rig.cluster.control_plane import Options, up
from kube_fault_proxy.rig.cluster.gomod import SHIM, yunikorn_gomod

CACHE_GO = textwrap.dedent("""\
    package external

    func (cache *SchedulerCache) forgetPod(pod *v1.Pod) {
    \tkey := string(pod.UID)

    \t// update the pod in cache
    \tcache.updatePod(pod)
    \tdelete(cache.assumedPods, key)
    }
    """)
FIX = textwrap.dedent("""\
    A fix: what it changes, which suggestion it implements.

    --- a/pkg/cache/external/scheduler_cache.go
    +++ b/pkg/cache/external/scheduler_cache.go
    @@ -3,6 +3,7 @@
     func (cache *SchedulerCache) forgetPod(pod *v1.Pod) {
     \tkey := string(pod.UID)
    \x20
    +\tdelete(cache.assumedPods, key)
     \t// update the pod in cache
     \tcache.updatePod(pod)
     \tdelete(cache.assumedPods, key)
    """)


class FakeGo(build.Toolchain):
    """`go mod download` answers with a fake released shim; `go build` writes a stand-in binary."""

    def __init__(self, pristine: Path, compile_error: str | None = None) -> None:
        self.pristine = pristine
        self.compile_error = compile_error
        self.compiled: list[tuple[str, str]] = []  # (version, the scheduler cache source it compiled)

    def module_dir(self, module: str, version: str, env: dict[str, str], workdir: Path) -> Path:
        assert (module, version) == (SHIM, versions.YUNIKORN)
        return self.pristine

    def compile(self, c: build.Component, moddir: Path, out: Path, env: dict[str, str],
                note: Callable[[str], None]) -> None:
        shim = build.shim_tree(c, moddir) or self.pristine  # the release: straight from the module cache
        self.compiled.append((c.version, (shim / "pkg/cache/external/scheduler_cache.go").read_text()))
        if self.compile_error:
            raise build.BuildError(f"building {c.package}@{c.version} failed:\n{self.compile_error}")
        out.write_bytes(b"ELF " + c.version.encode())


def fake_shim(root: Path, read_only: bool = False) -> Path:
    (root / "pkg/cache/external").mkdir(parents=True)
    (root / "go.mod").write_text(f"module {SHIM}\n\ngo 1.25.0\n")
    (root / "pkg/cache/external/scheduler_cache.go").write_text(CACHE_GO)
    if read_only:  # as Go's module cache is
        for p in sorted(root.rglob("*"), reverse=True):
            p.chmod(0o555 if p.is_dir() else 0o444)
        root.chmod(0o555)
    return root


def digest(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KFP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def go(tmp_path: Path) -> FakeGo:
    return FakeGo(fake_shim(tmp_path / "modcache" / "yunikorn-k8shim@v1.9.0", read_only=True))


def cached(cache: Path) -> dict[str, list[str]]:
    """What the cache holds: binaries and build directories."""
    return {d: sorted(p.name for p in (cache / d).iterdir()) if (cache / d).exists() else [] for d in ("bin", "build")}


def test_same_patch_same_binary_changed_patch_rebuilds(tmp_path: Path, cache: Path, go: FakeGo) -> None:
    patch = tmp_path / "3355-fix.patch"
    patch.write_text(FIX)
    before = digest(go.pristine)
    first = build.build(build.yunikorn(patch), say=False, go=go)
    key = hashlib.sha256(FIX.encode()).hexdigest()[:12]
    assert first == cache / "bin" / f"yunikorn-scheduler-v1.9.0+3355-fix-{key}" / "yunikorn-scheduler"
    assert first.read_bytes() == f"ELF v1.9.0+3355-fix-{key}".encode()
    assert "+\tdelete" not in go.compiled[0][1] and go.compiled[0][1].count("delete(cache.assumedPods, key)") == 2
    assert digest(go.pristine) == before  # the module cache's copy is never touched
    again = build.build(build.yunikorn(patch), say=False, go=go)
    assert again == first and len(go.compiled) == 1  # same bytes: the cached binary, no build
    patch.write_text(FIX.replace("A fix:", "A fix, reworded:"))
    changed = build.build(build.yunikorn(patch), say=False, go=go)
    assert changed != first and len(go.compiled) == 2 and first.is_file()  # any byte changes the key
    assert build.yunikorn(patch).variant == "3355-fix"
    assert build.yunikorn().version == versions.YUNIKORN and build.yunikorn().variant is None


BUG = textwrap.dedent("""\
    A planted bug, on top of the fix.

    --- a/pkg/cache/external/scheduler_cache.go
    +++ b/pkg/cache/external/scheduler_cache.go
    @@ -8,3 +8,3 @@
     \t// update the pod in cache
     \tcache.updatePod(pod)
    -\tdelete(cache.assumedPods, key)
    +\t// planted: the marker stays
    """)


def test_a_bug_on_a_fixed_base_builds_once_as_both_patches_in_order(tmp_path: Path, cache: Path, go: FakeGo) -> None:
    from kube_fault_proxy.rig.cluster import patches

    (tmp_path / "3355-fix.patch").write_text(FIX)
    (tmp_path / "bug.patch").write_text(BUG)
    combined = patches.combine([tmp_path / "3355-fix.patch", tmp_path / "bug.patch"], tmp_path / "planted")
    key = hashlib.sha256(combined.read_bytes()).hexdigest()[:12]
    component = build.yunikorn(combined)
    assert component.version == f"v1.9.0+3355-fix-bug-{key}" and component.variant == "3355-fix-bug"
    assert component.version not in (build.yunikorn(tmp_path / "3355-fix.patch").version,
                                     build.yunikorn(tmp_path / "bug.patch").version)
    first = build.build(component, say=False, go=go)
    source = go.compiled[0][1]  # the fix's line, then the bug's change to the lines after it
    assert source.count("delete(cache.assumedPods, key)") == 1 and "// planted: the marker stays" in source
    assert source.index("delete(cache.assumedPods, key)") < source.index("cache.updatePod(pod)")
    again = patches.combine([tmp_path / "3355-fix.patch", tmp_path / "bug.patch"], tmp_path / "again")
    assert build.build(build.yunikorn(again), say=False, go=go) == first and len(go.compiled) == 1  # same build


def test_a_patch_that_does_not_apply_names_file_and_hunk_and_caches_nothing(tmp_path: Path, cache: Path,
                                                                            go: FakeGo) -> None:
    patch = tmp_path / "stale.patch"
    patch.write_text(FIX.replace("\tkey := string(pod.UID)", "\tkey := pod.UID"))
    with pytest.raises(build.BuildInputError) as e:
        build.build(build.yunikorn(patch), say=False, go=go)
    assert str(e.value) == (
        f"{patch.resolve()}: hunk 1 of 1 for pkg/cache/external/scheduler_cache.go (patch line 5, @@ -3,6 +3,7 @@) "
        "does not apply: line 4 of pkg/cache/external/scheduler_cache.go is '\\tkey := string(pod.UID)'; "
        f"the patch expects '\\tkey := pod.UID' (against {SHIM}@v1.9.0)")
    assert go.compiled == [] and cached(cache) == {"bin": [], "build": []}


def test_a_patch_that_does_not_build_gives_the_compiler_error_and_caches_nothing(tmp_path: Path, cache: Path,
                                                                                  go: FakeGo) -> None:
    patch = tmp_path / "typo.patch"
    patch.write_text(FIX)
    go.compile_error = "pkg/cache/external/scheduler_cache.go:6:2: undefined: cache"
    with pytest.raises(build.BuildInputError) as e:
        build.build(build.yunikorn(patch), say=False, go=go)
    assert f"yunikorn-scheduler {build.yunikorn(patch).version} from {patch.resolve()} does not build" in str(e.value)
    assert "scheduler_cache.go:6:2: undefined: cache" in str(e.value)
    assert cached(cache) == {"bin": [], "build": []}


def test_a_release_build_failure_is_not_the_users_fault(cache: Path, go: FakeGo) -> None:
    go.compile_error = "proxy.golang.org: 403 Forbidden"
    with pytest.raises(build.BuildError) as e:
        build.build(build.yunikorn(), say=False, go=go)
    assert not isinstance(e.value, build.BuildInputError)


def test_a_source_tree_is_keyed_by_its_files_not_its_vcs(tmp_path: Path, cache: Path, go: FakeGo) -> None:
    tree = fake_shim(tmp_path / "yunikorn-k8shim")
    (tree / ".git").mkdir()
    (tree / ".git" / "HEAD").write_text("ref: refs/heads/fix\n")
    c = build.yunikorn(source=tree)
    assert c.version.startswith("src+yunikorn-k8shim-") and c.variant == "src-yunikorn-k8shim"
    built = build.build(c, say=False, go=go)
    assert go.compiled == [(c.version, CACHE_GO)] and (tree / "pkg").is_dir()  # built in place, not copied
    (tree / ".git" / "HEAD").write_text("ref: refs/heads/other\n")
    assert build.yunikorn(source=tree).version == c.version
    assert build.build(build.yunikorn(source=tree), say=False, go=go) == built and len(go.compiled) == 1
    (tree / "pkg/cache/external/scheduler_cache.go").write_text(CACHE_GO + "// changed\n")
    assert build.yunikorn(source=tree).version != c.version


@pytest.mark.parametrize(("patch", "source", "message"), [
    pytest.param("missing.patch", None, "--yunikorn-patch {tmp}/missing.patch: No such file or directory",
                 id="no such patch"),
    pytest.param(None, "empty", "--yunikorn-source {tmp}/empty: not a github.com/apache/yunikorn-k8shim checkout "
                 "(no go.mod naming that module)",
                 id="not a shim checkout"),
    pytest.param("x.patch", "empty", "--yunikorn-patch and --yunikorn-source exclude each other", id="both"),
])
def test_bad_build_inputs(tmp_path: Path, patch: str | None, source: str | None, message: str) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "go.mod").write_text("module example.com/other\n")
    with pytest.raises(build.BuildInputError) as e:
        build.yunikorn(tmp_path / patch if patch else None, tmp_path / source if source else None)
    assert str(e.value) == message.format(tmp=tmp_path)


def test_our_module_replaces_the_shim_by_a_tree(tmp_path: Path) -> None:
    gomod = textwrap.dedent(f"""\
        module {SHIM}

        go 1.25.0

        require (
        \tgithub.com/apache/yunikorn-core v1.9.0-1
        \tgithub.com/apache/yunikorn-scheduler-interface v0.0.0-20260727092410-674338955bdf
        \tk8s.io/api v0.35.5
        )

        replace (
        \tgithub.com/apache/yunikorn-scheduler-interface => ../yunikorn-scheduler-interface
        \tk8s.io/api => k8s.io/api v0.35.5
        )
        """)
    tree = tmp_path / "src" / "yunikorn-k8shim"
    out = yunikorn_gomod(gomod, versions.YUNIKORN, versions.YUNIKORN_REPLACES, tree)
    assert f"require {SHIM} v1.9.0" in out
    assert f"\t{SHIM} => {tree}\n" in out
    # the refused v1.9.0 pin is substituted; a tree's own pin and its own local replace are kept
    assert "\tgithub.com/apache/yunikorn-core => github.com/apache/yunikorn-core v1.9.0\n" in out
    assert f"\tgithub.com/apache/yunikorn-scheduler-interface => {tmp_path / 'src' / 'yunikorn-scheduler-interface'}\n" in out
    assert "\tk8s.io/api => k8s.io/api v0.35.5\n" in out
    release = yunikorn_gomod(gomod, versions.YUNIKORN, versions.YUNIKORN_REPLACES)
    assert SHIM + " =>" not in release
    assert "yunikorn-scheduler-interface => github.com/apache/yunikorn-scheduler-interface v1.9.0" in release


@pytest.mark.parametrize(("argv", "message"), [
    pytest.param(["cluster", "build", "yunikorn", "--patch", "{tmp}/nope.patch"],
                 "build failed: --yunikorn-patch {tmp}/nope.patch: No such file or directory", id="missing patch"),
    pytest.param(["cluster", "build", "kubectl", "--patch", "{tmp}/x.patch"], "--patch builds yunikorn or kube-scheduler (named alone)",
                 id="patch for another component"),
    pytest.param(["cluster", "build", "yunikron"], "no component yunikron (there are: yunikorn, kube-apiserver",
                 id="unknown component"),
])
def test_build_command_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
                                           message: str) -> None:
    from kube_fault_proxy.cli.main import main

    assert main([a.format(tmp=tmp_path) for a in argv]) == 2
    assert message.format(tmp=tmp_path) in capsys.readouterr().err


def test_a_yunikorn_build_needs_yunikorn(tmp_path: Path) -> None:
    with pytest.raises(build.BuildInputError, match="need --scheduler yunikorn"):
        up(Options(state_dir=tmp_path / "c", scheduler="kube-scheduler", yunikorn_patch=tmp_path / "x.patch"))
    assert not (tmp_path / "c").exists()  # refused before anything started


def test_a_second_builder_waits_for_the_first_and_reuses_its_binary(cache: Path, go: FakeGo) -> None:
    """Two processes building one binary into one cache (a scenario run beside `cluster build`) shared the
    `.partial` file, and the second rename failed: now the second waits for the build lock, then finds the
    binary and compiles nothing."""
    import fcntl
    import threading

    c = build.yunikorn()
    lock = cache / "locks" / f"{c.binary.parent.name}.lock"
    lock.parent.mkdir(parents=True)
    result: list[Path] = []
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # "another process" is building it
        waiter = threading.Thread(target=lambda: result.append(build.build(c, say=False, go=go)))
        waiter.start()
        waiter.join(0.5)
        assert waiter.is_alive() and not result  # waiting for the lock, not compiling beside it
        c.binary.parent.mkdir(parents=True)
        c.binary.write_bytes(b"ELF built by the other process")
    waiter.join(10)
    assert result == [c.binary] and go.compiled == []
    assert c.binary.read_bytes() == b"ELF built by the other process"
