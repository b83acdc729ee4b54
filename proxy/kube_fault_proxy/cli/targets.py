"""The target options every command that starts a control plane shares (`cluster up`, scenarios, the search)."""

from __future__ import annotations

import argparse
import re

_RUNTIME_CONFIG = re.compile(r"(api/(all|ga|beta|alpha)|[a-z0-9.-]+/v[0-9]+((alpha|beta)[0-9]+)?)=(true|false)")


def feature_gate(text: str) -> tuple[str, str, bool]:
    """One --feature-gates value, parsed (argparse names the option and the value on error)."""
    from kube_fault_proxy.rig.cluster.feature_gates import parse

    try:
        return parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def runtime_config(text: str) -> str:
    """One --runtime-config value: `group/version=true|false` (or `api/all=true`), as kube-apiserver takes it."""
    if not _RUNTIME_CONFIG.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not GROUP/VERSION=true|false "
                                         "(e.g. scheduling.k8s.io/v1beta1=true)")
    return text


def kubernetes_version(text: str) -> str:
    """One --kubernetes value: a release the rig builds (argparse names the option and the value on error)."""
    from kube_fault_proxy.rig.cluster.versions import line

    try:
        line(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def add_kubernetes_argument(p: argparse.ArgumentParser) -> None:
    """--kubernetes VERSION, for every command that builds or starts the Kubernetes components."""
    from kube_fault_proxy.rig.cluster.versions import KUBERNETES, RELEASES

    p.add_argument("--kubernetes", type=kubernetes_version, default=KUBERNETES, metavar="VERSION",
                   help="the Kubernetes release of kube-apiserver, kube-controller-manager, kube-scheduler and "
                        f"kubectl, with the etcd it is tested with ({', '.join(RELEASES)}, or a later patch of "
                        "one of their minor releases)")


def add_target_arguments(p: argparse.ArgumentParser) -> None:
    """--kubernetes VERSION and --feature-gates component:Gate=bool (repeatable), for every command that starts
    a control plane."""
    add_kubernetes_argument(p)
    p.add_argument("--feature-gates", type=feature_gate, action="append", default=[], metavar="COMPONENT:GATE=BOOL",
                   help="set a feature gate on one component's --feature-gates (repeatable; components "
                        "kube-apiserver, kube-controller-manager, kube-scheduler), e.g. "
                        "kube-scheduler:SchedulerAsyncAPICalls=true; recorded with its build as the target")
