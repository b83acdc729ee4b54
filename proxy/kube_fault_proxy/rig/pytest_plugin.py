"""pytest plugin: a proxy (and optionally a local control plane) per session, a `faults` handle per test.

Registered through the `pytest11` entry point. Every setting is an ini option and a command-line
flag; the command line wins; they are merged once, in pytest_configure.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

SETTINGS: dict[str, tuple[str, str]] = {
    # name: (kind, help)
    "url": ("string", "control-plane URL of a proxy that is already running (no process is started)"),
    "kubeconfig": ("string", "start `kube-fault-proxy serve` in front of the cluster in this kubeconfig"),
    "profiles": ("string", "fault profile directory for a proxy the plugin starts (default: fault_profiles)"),
    "cluster": ("bool", "start the local real control plane (kube-apiserver, etcd, fake nodes, proxy)"),
    "scheduler": ("string", "with cluster: none, kube-scheduler or yunikorn (default: kube-scheduler)"),
    "nodes": ("string", "with cluster: how many fake nodes (default: 20)"),
    "keep": ("bool", "keep the local control plane running after the session"),
    "token": ("string", "bearer token for the control plane"),
    "yunikorn-patch": ("string", "with cluster and yunikorn: v1.9.0 with this unified diff applied (cached by hash)"),
    "yunikorn-source": ("string", "with cluster and yunikorn: built from this yunikorn-k8shim checkout"),
    "feature-gates": ("string", "with cluster: feature gates, component:Gate=bool separated by spaces or commas "
                                "(e.g. kube-scheduler:SchedulerAsyncAPICalls=true)"),
    "kubernetes": ("string", "with cluster: the Kubernetes release of its components, e.g. v1.37.2 (default: "
                             "the rig's default release)"),
}
JOURNAL_TAIL = 12


@dataclass(frozen=True)
class PluginConfig:
    """The merged settings: command line over ini over defaults."""

    url: str | None
    kubeconfig: Path | None
    profiles: Path
    cluster: bool
    scheduler: str
    nodes: int
    keep: bool
    token: str | None
    yunikorn_patch: Path | None = None
    yunikorn_source: Path | None = None
    feature_gates: dict[str, dict[str, bool]] = field(default_factory=dict)  # component -> gate -> on
    kubernetes: str | None = None  # the release of the cluster's components; None: versions.KUBERNETES


def _gates(text: str | None) -> dict[str, dict[str, bool]]:
    """The feature-gates setting, parsed; a bad one is a usage error naming it."""
    from kube_fault_proxy.rig.cluster.feature_gates import collect

    try:
        return collect(text.replace(",", " ").split() if text else [])
    except ValueError as e:
        raise pytest.UsageError(f"kube-fault-proxy feature-gates: {e}") from None


def _kubernetes(text: str | None) -> str | None:
    """The kubernetes setting, checked; a release the rig does not build is a usage error naming it."""
    from kube_fault_proxy.rig.cluster.versions import line

    if not text:
        return None
    try:
        line(text)
    except ValueError as e:
        raise pytest.UsageError(f"kube-fault-proxy kubernetes: {e}") from None
    return text


CONFIG_KEY: pytest.StashKey[PluginConfig] = pytest.StashKey()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kube-fault-proxy")
    for name, (kind, help_text) in SETTINGS.items():
        flag = f"--kube-fault-proxy-{name}"
        if kind == "bool":
            group.addoption(flag, action="store_true", default=None, help=help_text)
            parser.addini(_ini(name), help_text, type="bool")
        else:
            group.addoption(flag, default=None, help=help_text)
            parser.addini(_ini(name), help_text, type="string")


def _ini(name: str) -> str:
    return f"kube_fault_proxy_{name.replace('-', '_')}"


def _merged(config: pytest.Config) -> PluginConfig:
    def get(name: str) -> Any:
        flag = config.getoption(f"--kube-fault-proxy-{name}")
        return flag if flag is not None else config.getini(_ini(name))

    def path(name: str) -> Path | None:
        """A flag's path is the shell's (cwd); an ini option's is relative to the ini file."""
        flag = config.getoption(f"--kube-fault-proxy-{name}")
        if flag:
            return Path(flag).resolve()
        ini = config.getini(_ini(name))
        return ((config.inipath.parent if config.inipath else config.rootpath) / ini).resolve() if ini else None

    from kube_fault_proxy import shipped

    kubeconfig = get("kubeconfig")
    return PluginConfig(
        url=get("url") or None,
        kubeconfig=Path(kubeconfig) if kubeconfig else None,
        profiles=shipped.profiles_dir(Path(get("profiles")) if get("profiles") else None),
        cluster=bool(get("cluster")),
        scheduler=get("scheduler") or "kube-scheduler",
        nodes=int(get("nodes") or 20),
        keep=bool(get("keep")),
        token=get("token") or os.environ.get("KFP_CONTROL_TOKEN") or None,
        yunikorn_patch=path("yunikorn-patch"),
        yunikorn_source=path("yunikorn-source"),
        feature_gates=_gates(get("feature-gates")),
        kubernetes=_kubernetes(get("kubernetes")),
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "fault_profile(name, seed=None): activate this profile for the test")
    config.stash[CONFIG_KEY] = _merged(config)


def profiles_in(source: str | Path | list[str]) -> list[Any]:
    """`pytest.param`s for every profile in a directory (or a list of names), with readable ids."""
    if isinstance(source, list):
        names = source
    else:
        from kube_fault_proxy.proxy.profiles.library import load_dir

        names = sorted(load_dir(Path(source)))
    return [pytest.param(name, id=name) for name in names]


@dataclass
class ProxyHandle:
    """A proxy the tests talk to: where it listens and where its control plane is."""

    control_url: str
    proxy_url: str | None = None
    ca_file: str | None = None
    process: subprocess.Popen[bytes] | None = None


class Faults:
    """Switch faults for one test; it starts and ends in pass-through."""

    def __init__(self, proxy: ProxyHandle, token: str | None) -> None:
        from kube_fault_proxy.proxy.control.client import ControlClient

        self.control = ControlClient(proxy.control_url, token, timeout=30)
        self.cursor = 0
        self.active_profile: dict[str, Any] | None = None

    @property
    def http(self) -> httpx.Client:
        """The control plane's raw HTTP client, for calls the methods below do not make."""
        return self.control.http

    @contextlib.contextmanager
    def _refused_fails(self) -> Iterator[None]:
        """A refused call fails the test with the proxy's own message."""
        from kube_fault_proxy.proxy.control.client import ControlError

        try:
            yield
        except ControlError as e:
            raise AssertionError(f"kube-fault-proxy refused {e.method} {e.path}: {e}") from None

    def reset(self) -> None:
        """Pass-through, zeroed stats, and the journal read from here on."""
        with self._refused_fails():
            self.control.deactivate()
            self.control.reset_stats()
            self.cursor = self.control.cursor()
        self.active_profile = None

    def activate(self, profile: str | dict[str, Any], seed: int | None = None,
                 ttl: float | None = None) -> dict[str, Any]:
        """Activate a profile by name, or upload-and-activate one given as a dict."""
        with self._refused_fails():
            self.active_profile = self.control.activate(profile, seed, ttl)
        return self.active_profile

    def deactivate(self) -> None:
        """Back to pass-through."""
        with self._refused_fails():
            self.control.deactivate()

    @contextlib.contextmanager
    def active(self, profile: str | dict[str, Any], seed: int | None = None) -> Iterator[dict[str, Any]]:
        """`with faults.active("bind-fail-30pct"):` — pass-through again afterwards."""
        try:
            yield self.activate(profile, seed)
        finally:
            self.deactivate()

    def stats(self) -> dict[str, Any]:
        """The proxy's stats (zeroed when the test began)."""
        with self._refused_fails():
            return self.control.stats()

    def journal(self) -> list[dict[str, Any]]:
        """Journal records written since the test began."""
        with self._refused_fails():
            return self.control.journal_after(self.cursor).records

    def injections(self) -> list[dict[str, Any]]:
        """Just the injections since the test began."""
        return [r for r in self.journal() if r["event"] == "inject"]

    def describe(self) -> str:
        """What was active and what the journal says, for failure reports."""
        lines = []
        if self.active_profile:
            a = self.active_profile
            lines.append(f"active profile: {a.get('profile')} (epoch {a.get('epoch')}, seed {a.get('seed')})")
            with contextlib.suppress(httpx.HTTPError, AssertionError), self._refused_fails():
                profile = self.control.profile(str(a.get("profile")))
                lines.append("rules: " + ", ".join(
                    f"{r['name']}={next(iter(r['fault']))}" for r in profile["spec"].get("rules", [])))
        else:
            lines.append("active profile: none (pass-through)")
        try:
            tail = self.journal()[-JOURNAL_TAIL:]
        except (httpx.HTTPError, AssertionError) as e:
            tail, lines = [], [*lines, f"journal unavailable: {e}"]
        lines.append(f"journal tail ({len(tail)} records):")
        lines += [json.dumps(r, separators=(",", ":"))[:300] for r in tail]
        return "\n".join(lines)


FAULTS_KEY: pytest.StashKey[Faults] = pytest.StashKey()


def _start_serve(kubeconfig: Path, profiles: Path, workdir: Path) -> ProxyHandle:
    from kube_fault_proxy.rig.cluster.proxy_process import start_serve

    served = start_serve(["--kubeconfig", str(kubeconfig), "--profiles", str(profiles), "--listen", "127.0.0.1:0",
                          "--control", "127.0.0.1:0", "--journal", str(workdir / "journal.jsonl"),
                          "--confdir", str(workdir / "ca")], workdir / "ready.json", workdir / "proxy.log")
    return ProxyHandle(served.control_url, served.proxy_url, served.ca_file, served.proc)


@pytest.fixture(scope="session")
def kfp_config(request: pytest.FixtureRequest) -> PluginConfig:
    """The merged plugin settings."""
    return request.config.stash[CONFIG_KEY]


@pytest.fixture(scope="session")
def kfp_cluster(kfp_config: PluginConfig) -> Iterator[Any]:
    """The local real control plane with the proxy in front (`cluster up` underneath)."""
    from kube_fault_proxy.rig.cluster.control_plane import Options, running
    from kube_fault_proxy.rig.cluster.versions import KUBERNETES

    state = Path(tempfile.mkdtemp(prefix="kfp-pytest-cluster-"))
    with running(Options(state_dir=state, nodes=kfp_config.nodes, scheduler=kfp_config.scheduler, proxy=True,
                         profiles_dir=kfp_config.profiles, yunikorn_patch=kfp_config.yunikorn_patch,
                         yunikorn_source=kfp_config.yunikorn_source, feature_gates=kfp_config.feature_gates,
                         kubernetes=kfp_config.kubernetes or KUBERNETES),
                 keep=kfp_config.keep) as c:
        yield c


@pytest.fixture(scope="session")
def kfp_proxy(request: pytest.FixtureRequest, kfp_config: PluginConfig) -> Iterator[ProxyHandle]:
    """The proxy: attached (--kube-fault-proxy-url), started (--…-kubeconfig) or the cluster's (--…-cluster)."""
    if kfp_config.url:
        yield ProxyHandle(kfp_config.url)
        return
    if kfp_config.kubeconfig:
        handle = _start_serve(kfp_config.kubeconfig, kfp_config.profiles,
                              Path(tempfile.mkdtemp(prefix="kfp-pytest-proxy-")))
        yield handle
        assert handle.process is not None
        handle.process.terminate()
        handle.process.wait(15)
        return
    if kfp_config.cluster:
        proxy = request.getfixturevalue("kfp_cluster").proxy
        yield ProxyHandle(proxy.control, proxy.url, str(proxy.ca_file))
        return
    raise pytest.UsageError("kube-fault-proxy: set --kube-fault-proxy-url, --kube-fault-proxy-kubeconfig or "
                            "--kube-fault-proxy-cluster (or the matching ini options)")


@pytest.fixture
def faults(request: pytest.FixtureRequest, kfp_proxy: ProxyHandle, kfp_config: PluginConfig) -> Iterator[Faults]:
    """Per test: pass-through before and after; the fault_profile marker activates a profile."""
    handle = Faults(kfp_proxy, kfp_config.token)
    handle.reset()
    request.node.stash[FAULTS_KEY] = handle
    marker = request.node.get_closest_marker("fault_profile")
    if marker is not None:
        handle.activate(marker.args[0], seed=marker.kwargs.get("seed"))
    yield handle
    handle.deactivate()


def assert_clean(report: Any) -> None:
    """Fail with the invariant table unless the check found nothing."""
    from kube_fault_proxy.rig.invariants.check import render

    if not report.ok:
        raise AssertionError("invariants violated:\n" + render(report))


def assert_violates(report: Any, *invariants: str) -> None:
    """Fail unless every named invariant is broken (by name, e.g. `no-phantom-allocation`, or alias, `I2`)."""
    from kube_fault_proxy.rig.invariants.catalogue import lookup
    from kube_fault_proxy.rig.invariants.check import render

    broken = {name for name, vs in report.by_invariant().items() if vs}
    missing = {word for word in invariants if lookup(word).key not in broken}
    if missing:
        raise AssertionError(f"expected {sorted(missing)} to be violated:\n" + render(report))


@pytest.fixture
def kfp_load(kfp_cluster: Any) -> Any:
    """`kfp_load(count=100, namespace="t", scheduler_name="yunikorn", rate=200)` on the local
    control plane; returns the LoadResult."""
    from kube_fault_proxy.rig.workloads import load

    def run(**spec: Any) -> Any:
        return load.create_pods(kfp_cluster.admin_api(), load.LoadSpec(**spec), progress=False)

    return run


@pytest.fixture
def kfp_check(kfp_cluster: Any) -> Any:
    """`kfp_check(scheduler_name="yunikorn", namespace="t")`: wait until every pod there runs (or
    nothing changed for `quiet` seconds), then the invariants; returns the Report."""
    from kube_fault_proxy.rig.invariants import check

    def run(scheduler_name: str = "default-scheduler", namespace: str | None = None, quiet: float = 30.0,
            timeout: float = 240.0, grace: float = 0.0) -> Any:
        with kfp_cluster.admin_api().client() as client:
            done = check.all_bound(namespace) if namespace else None
            snap, settled = check.wait_quiet(lambda: check.fetch(client, kfp_cluster.yunikorn_url), quiet,
                                             timeout, done=done)
        report = check.evaluate(snap, {scheduler_name}, grace, namespace)
        report.quiet = settled
        return report

    return run


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed and call.when == "call" and FAULTS_KEY in item.stash:
        report.sections.append(("kube-fault-proxy", item.stash[FAULTS_KEY].describe()))
    return report
