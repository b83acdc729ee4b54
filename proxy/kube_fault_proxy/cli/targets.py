"""The target options every command that starts a control plane shares (`cluster up`, scenarios, the search)."""

from __future__ import annotations

import argparse


def feature_gate(text: str) -> tuple[str, str, bool]:
    """One --feature-gates value, parsed (argparse names the option and the value on error)."""
    from kube_fault_proxy.rig.cluster.feature_gates import parse

    try:
        return parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_target_arguments(p: argparse.ArgumentParser) -> None:
    """--feature-gates component:Gate=bool (repeatable), for every command that starts a control plane."""
    p.add_argument("--feature-gates", type=feature_gate, action="append", default=[], metavar="COMPONENT:GATE=BOOL",
                   help="set a feature gate on one component's --feature-gates (repeatable; components "
                        "kube-apiserver, kube-controller-manager, kube-scheduler), e.g. "
                        "kube-scheduler:SchedulerAsyncAPICalls=true; recorded with its build as the target")
