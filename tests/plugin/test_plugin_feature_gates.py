"""The pytest plugin's feature-gates setting: parsed from ini or the command line, a bad one a usage error."""

from __future__ import annotations

import pytest


def test_feature_gates_from_ini_and_flag(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nkube_fault_proxy_feature_gates = kube-scheduler:SchedulerAsyncAPICalls=true,"
                     " kube-controller-manager:StaleControllerConsistencyJob=false\n")
    pytester.makepyfile(test_gates="""
        def test_gates(kfp_config):
            print("GATES", " ".join(sorted(f"{c}:{g}={v}" for c, gs in kfp_config.feature_gates.items()
                                           for g, v in gs.items())))
    """)
    pytester.runpytest("-s").stdout.fnmatch_lines([
        "*GATES kube-controller-manager:StaleControllerConsistencyJob=False kube-scheduler:SchedulerAsyncAPICalls=True*"])
    flag = pytester.runpytest("-s", "--kube-fault-proxy-feature-gates", "kube-apiserver:WatchList=false")
    flag.stdout.fnmatch_lines(["*GATES kube-apiserver:WatchList=False"])


def test_a_bad_feature_gate_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("--kube-fault-proxy-feature-gates", "kubelet:Foo=true")
    result.stderr.fnmatch_lines(["*kube-fault-proxy feature-gates: 'kubelet:Foo=true': unknown component 'kubelet'*"])
    assert result.ret == pytest.ExitCode.USAGE_ERROR
