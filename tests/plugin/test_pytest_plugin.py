"""The pytest plugin, tested with pytest's own pytester: settings, noproc mode, markers, reset,
parametrized profiles and failure reports, against a real `kube-fault-proxy serve`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.certs import make_pki
from tests.support.processes import Started, start_fake_apiserver, start_proxy


@pytest.fixture(scope="module")
def running_proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    work = tmp_path_factory.mktemp("plugin")
    pki = make_pki(work / "pki")
    up = start_fake_apiserver(pki, work / "up")
    proxy = start_proxy(f"https://127.0.0.1:{up.ready['port']}", pki, work / "proxy")
    yield proxy
    proxy.stop()
    up.stop()


def test_command_line_wins_over_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nkube_fault_proxy_scheduler = yunikorn\nkube_fault_proxy_nodes = 7\n")
    pytester.makepyfile(test_settings="""
        def test_settings(kfp_config, pytestconfig):
            print("SETTINGS", kfp_config.scheduler, kfp_config.nodes, kfp_config.keep)
    """)
    ini_only = pytester.runpytest("-s")
    ini_only.stdout.fnmatch_lines(["*SETTINGS yunikorn 7 False*"])
    flags = pytester.runpytest("-s", "--kube-fault-proxy-scheduler", "kube-scheduler", "--kube-fault-proxy-keep")
    flags.stdout.fnmatch_lines(["*SETTINGS kube-scheduler 7 True*"])


def test_no_proxy_configured_is_a_clear_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(faults):\n    pass\n")
    result = pytester.runpytest()
    result.stdout.fnmatch_lines(["*set --kube-fault-proxy-url, --kube-fault-proxy-kubeconfig or "
                                 "--kube-fault-proxy-cluster*"])
    assert result.ret != 0


INNER = '''
import httpx
import pytest
from kube_fault_proxy.rig.pytest_plugin import profiles_in

BIND = {"verbs": ["create"], "resources": ["pods"], "subresources": ["binding"]}


def active(faults):
    return faults.control.active()["profile"]


@pytest.mark.fault_profile("bind-fail-30pct", seed=3)
def test_marker_activates(faults):
    got = faults.control.active()
    assert (got["profile"], got["seed"]) == ("bind-fail-30pct", 3)


def test_next_test_starts_in_pass_through(faults):
    assert active(faults) is None
    assert faults.stats()["injectionsTotal"] == 0


def test_context_manager_and_inline_profile(faults, kfp_proxy):
    profile = {"apiVersion": "kube-fault-proxy/v1", "kind": "FaultProfile", "metadata": {"name": "inline"},
               "spec": {"rules": [{"name": "r", "match": BIND, "fault": {"abort": {"status": 503}}}]}}
    with faults.active(profile, seed=1):
        assert active(faults) == "inline"
    assert active(faults) is None


@pytest.mark.parametrize("profile", profiles_in(["bind-slow", "apf-throttle-binds"]))
def test_every_profile(faults, profile):
    faults.activate(profile, seed=5)
    assert active(faults) == profile


def test_failure_shows_profile_seed_and_journal(faults):
    faults.activate("bind-commit-then-fail", seed=9)
    assert False, "deliberate"
'''


def test_noproc_mode_markers_reset_and_failure_reports(pytester: pytest.Pytester, running_proxy: Started) -> None:
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest("-v", "--kube-fault-proxy-url", running_proxy.ready["controlUrl"],
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5, failed=1)
    result.stdout.fnmatch_lines([
        "*test_every_profile?bind-slow? PASSED*",
        "*test_every_profile?apf-throttle-binds? PASSED*",
        "*- kube-fault-proxy -*",
        "active profile: bind-commit-then-fail (epoch *, seed 9)",
        "rules: commit-then-timeout=commitThenFail",
        "journal tail (*",
        '*"event":"activate","profile":"bind-commit-then-fail"*',
    ])


def test_ini_url_works_like_the_flag(pytester: pytest.Pytester, running_proxy: Started) -> None:
    pytester.makeini(f"[pytest]\nkube_fault_proxy_url = {running_proxy.ready['controlUrl']}\n")
    pytester.makepyfile("def test_x(faults):\n    assert faults.stats()['requests'] >= 0\n")
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_a_proxy_the_plugin_starts_from_a_kubeconfig(pytester: pytest.Pytester, tmp_path: Path,
                                                      running_proxy: Started) -> None:
    """--kube-fault-proxy-kubeconfig starts `serve` itself, in front of the cluster in the kubeconfig."""
    import base64

    import yaml

    pki = Path(running_proxy.log).parents[1] / "pki"
    upstream = running_proxy.ready["upstream"]
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": upstream,
                                               "certificate-authority": str(pki / "ca.pem")}}],
        "users": [{"name": "u", "user": {
            "client-certificate-data": base64.b64encode((pki / "client.pem").read_bytes()).decode(),
            "client-key-data": base64.b64encode((pki / "client.key").read_bytes()).decode()}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    pytester.makepyfile("""
        import httpx

        def test_through_the_started_proxy(faults, kfp_proxy):
            with httpx.Client(base_url=kfp_proxy.proxy_url, verify=kfp_proxy.ca_file) as c:
                assert c.get("/healthz").status_code == 200
                faults.activate("bind-fail-first-attempt")
                r = c.post("/api/v1/namespaces/default/pods/p1/binding", json={"target": {"name": "n"}})
                assert r.status_code == 500
            assert [i["rule"] for i in faults.injections()] == ["fail-first-bind-per-pod"]
    """)
    profiles = Path(__file__).resolve().parents[2] / "fault_profiles"
    result = pytester.runpytest("--kube-fault-proxy-kubeconfig", str(kubeconfig), "--kube-fault-proxy-profiles",
                                str(profiles), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_assert_helpers_name_the_broken_invariants() -> None:
    from kube_fault_proxy.rig.invariants.check import Report, Violation
    from kube_fault_proxy.rig.pytest_plugin import assert_clean, assert_violates

    clean = Report(checked=["stranded", "I2"])
    broken = Report(violations=[Violation("I2", "phantom allocation: ns/p", ("ns/p",))], checked=["stranded", "I2"])
    assert_clean(clean)
    assert_violates(broken, "I2")
    assert_violates(broken, "no-phantom-allocation")  # the same invariant by name
    with pytest.raises(AssertionError, match=r"(?s)invariants violated:.*I2 no-phantom-allocation +NO +1  ns/p"):
        assert_clean(broken)
    with pytest.raises(AssertionError, match=r"expected \['stranded'\] to be violated"):
        assert_violates(broken, "stranded", "I2")
