"""Argument parsing and dispatch; exit codes: 0 ok, 1 a check failed, 2 usage or input error."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from kube_fault_proxy import __version__, paths, shipped
from kube_fault_proxy.cli.exits import DEFAULT_CONTROL, FAILED, OK, USAGE
from kube_fault_proxy.cli.targets import add_kubernetes_argument, add_target_arguments, runtime_config


def _serve_args(p: argparse.ArgumentParser) -> None:
    up = p.add_argument_group("upstream (a kubeconfig, or a URL with its CA)")
    up.add_argument("--kubeconfig", type=Path, help="kubeconfig of the real apiserver")
    up.add_argument("--context", help="kubeconfig context (default: current)")
    up.add_argument("--upstream", metavar="URL", help="apiserver URL, e.g. https://127.0.0.1:6443")
    up.add_argument("--upstream-ca", type=Path, metavar="FILE", help="CA that signs the apiserver")
    up.add_argument("--client-cert", type=Path, metavar="FILE", help="client certificate for upstream")
    up.add_argument("--client-key", type=Path, metavar="FILE", help="its private key")
    up.add_argument("--insecure", action="store_true", help="do not verify the apiserver (avoid)")
    p.add_argument("--listen", default="127.0.0.1:7443", metavar="HOST:PORT",
                   help="where schedulers connect (default 127.0.0.1:7443)")
    p.add_argument("--control", default="127.0.0.1:7080", metavar="HOST:PORT",
                   help="the control plane's address (default 127.0.0.1:7080; non-loopback needs a token)")
    p.add_argument("--control-token", metavar="TOKEN",
                   help="bearer token for the control plane (default: $KFP_CONTROL_TOKEN); "
                        "required when --control is not a loopback address")
    p.add_argument("--profiles", type=Path, metavar="DIR",
                   help="profile library (default: ./fault_profiles if it exists, else the one the package ships)")
    p.add_argument("--profile", metavar="NAME", help="activate this profile at startup")
    p.add_argument("--seed", type=int, help="seed for --profile")
    p.add_argument("--journal", type=Path, default=None,
                   help=f"journal file (default: {paths.default_journal()})")
    p.add_argument("--confdir", type=Path, default=None,
                   help=f"where the proxy's CA lives (default: {paths.ca_dir()})")
    p.add_argument("--ready-file", type=Path, help="write proxy/control URLs here as JSON once ready")
    p.add_argument("--max-concurrent-streams", type=int, default=4096, metavar="N",
                   help="HTTP/2 streams a client may have open on one connection (default 4096; "
                        "kube-apiserver's default is 100; see the manual's guide to serve)")
    p.add_argument("--stock-mitmproxy", action="store_true", default=os.environ.get("KFP_STOCK_MITMPROXY") == "1",
                   help="run mitmproxy, hyper-h2 and hpack as they ship: skip every library change of the proxy "
                        "(each is otherwise applied only where its verified source is installed; see /v1/info). "
                        "Default: on when KFP_STOCK_MITMPROXY=1 (so a cluster's proxy can be run stock)")
    p.add_argument("--scheduler-build", metavar="TEXT",
                   help="the scheduler under test's exact build, recorded in proxy-start and every activate record")
    p.add_argument("--read-header-timeout", default="32s", metavar="DURATION",
                   help="close a client connection that has not sent a whole request this long after "
                        "connecting (default 32s, as kube-apiserver; 0s: never)")
    p.add_argument("--idle-timeout", default="90s", metavar="DURATION",
                   help="close a client connection with no request open for this long (default 90s, as "
                        "kube-apiserver; 0s: never)")
    p.add_argument("-v", "--verbose", action="store_true", help="log every proxy event")
    kube = p.add_argument_group("profiles and activations from the cluster (FaultProfile, FaultActivation)")
    kube.add_argument("--profiles-from-cluster", action="store_true",
                      help="list and watch FaultProfiles and FaultActivations through the upstream, with the "
                           "upstream kubeconfig's own credentials, and apply them live")
    kube.add_argument("--namespace", default="default", help="the namespace watched (default: default)")
    kube.add_argument("--proxy-name", metavar="NAME",
                      help="this proxy's name in activation status (default: the host name, a pod's name)")
    kube.add_argument("--proxy-labels", default="", metavar="K=V,...",
                      help="this proxy's labels, which spec.proxySelector matches")
    kube.add_argument("--status-interval", default="5s", metavar="DURATION",
                      help="write injection counters to activation status at most this often (default 5s; "
                           "changes of state are written at once)")


def _ctl_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--control", default=DEFAULT_CONTROL, metavar="URL",
                   help=f"control plane URL (default: $KFP_CONTROL_URL or {DEFAULT_CONTROL})")
    p.add_argument("--token", help="bearer token (default: $KFP_CONTROL_TOKEN)")
    sub = p.add_subparsers(dest="ctl_command", required=True, metavar="ACTION")
    a = sub.add_parser("activate", help="activate a profile (live)")
    a.add_argument("profile", help="the profile's name in the running proxy's library")
    a.add_argument("--seed", type=int, help="seed for this activation (default: the profile's, else random)")
    a.add_argument("--ttl", metavar="DURATION", help="revert to pass-through after this, e.g. 30s")
    sub.add_parser("deactivate", help="back to pass-through")
    sub.add_parser("status", help="what is active")
    s = sub.add_parser("stats", help="request and injection counters")
    s.add_argument("--reset", action="store_true", help="zero them")
    j = sub.add_parser("journal", help="journal records")
    j.add_argument("--since", type=int, default=0, help="only records after this sequence number (default 0)")
    j.add_argument("--limit", type=int, default=1000, help="at most this many records (default 1000)")
    u = sub.add_parser("upload", help="upload (add or replace) profile files")
    u.add_argument("files", nargs="+", type=Path, help="profile files (YAML or JSON)")
    sub.add_parser("profiles", help="profiles the running proxy knows")


def _cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--state-dir", type=Path, default=None,
                   help=f"certificates, data, logs, kubeconfigs (default: {paths.state_dir() / 'cluster'})")
    sub = p.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    u = sub.add_parser("up", help="start etcd, kube-apiserver, kube-controller-manager, fake nodes run by KWOK, "
                                  "and more")
    u.add_argument("--nodes", type=int, default=50, help="fake Nodes to create, managed by KWOK (default 50)")
    u.add_argument("--node-cpu", default="16", metavar="QTY", help="each node's cpu capacity (default 16)")
    u.add_argument("--node-memory", default="64Gi", metavar="QTY", help="each node's memory (default 64Gi)")
    u.add_argument("--node-pods", type=int, default=110, metavar="N", help="pods per node (default 110)")
    u.add_argument("--controllers", metavar="LIST", help="kube-controller-manager's --controllers (default: namespace, "
                   "garbage collector, service accounts and tokens, node lifecycle and a few more; '*': all)")
    u.add_argument("--scheduler", choices=["none", "kube-scheduler", "yunikorn"], default="none",
                   help="the scheduler to start (default none)")
    u.add_argument("--proxy", action="store_true", help="start kube-fault-proxy in front; schedulers go through it")
    u.add_argument("--profile", help="with --proxy: activate this profile at startup")
    u.add_argument("--profiles", type=Path, metavar="DIR",
                   help="profile library (default: ./fault_profiles if it exists, else the one the package ships)")
    u.add_argument("--timeout", type=float, default=120.0, help="seconds each component may take to be ready")
    u.add_argument("--apiserver-max-streams", type=int, default=4096, metavar="N",
                   help="kube-apiserver --http2-max-streams-per-connection (default 4096, as the proxy "
                        "advertises; 0 = the apiserver's own default, 100)")
    u.add_argument("--proxy-max-streams", type=int, default=4096, metavar="N",
                   help="with --proxy: the streams it advertises (serve --max-concurrent-streams)")
    add_target_arguments(u)
    u.add_argument("--workload-controllers", action="store_true",
                   help="add kube-controller-manager's workload controllers (replicaset, deployment, job, statefulset, "
                        "daemonset) to --controllers")
    u.add_argument("--through-proxy", action="append", metavar="COMPONENT",
                   choices=["kube-scheduler", "yunikorn", "kube-controller-manager"],
                   help="with --proxy: this client's kubeconfig points at the proxy (repeatable; kube-scheduler, "
                        "yunikorn, kube-controller-manager; default: the scheduler alone)")
    u.add_argument("--runtime-config", type=runtime_config, action="append", default=[],
                   metavar="GROUP/VERSION=BOOL",
                   help="serve (or not) an API version in kube-apiserver's --runtime-config (repeatable), e.g. "
                        "scheduling.k8s.io/v1beta1=true for gang scheduling's Workload and PodGroup")
    u.add_argument("--real-node", action="store_true",
                   help="add a real node, kfp-real-node: a kubelet backed by containerd and runc, whose pods really "
                        "run (as root; Debian's containerd, runc, containernetworking-plugins and busybox-static are "
                        "installed if missing; images made locally; one per machine)")
    d = sub.add_parser("down", help="stop everything `up` started (by process group; SIGKILL after --grace)")
    d.add_argument("--grace", type=float, default=10.0, metavar="SECONDS",
                   help="how long SIGTERM may take before SIGKILL (default 10)")
    sub.add_parser("status", help="what is running (exit 1 unless everything is up)")
    sub.add_parser("env", help="shell exports (KUBECONFIG, KFP_CONTROL_URL, …)")
    b = sub.add_parser("build", help="build (or reuse) the real components from the Go module proxy")
    b.add_argument("components", nargs="*", help="default: all")
    b.add_argument("--patch", type=Path, metavar="FILE",
                   help="yunikorn: apply this unified diff to a copy of the v1.9.0 shim; kube-scheduler (named "
                        "alone): to a copy of k8s.io/kubernetes at --kubernetes (each cached by the patch's hash)")
    b.add_argument("--source", type=Path, metavar="DIR",
                   help="yunikorn: build this yunikorn-k8shim checkout (a replace directive; cached by its hash)")
    add_kubernetes_argument(b)
    u.add_argument("--yunikorn-patch", type=Path, metavar="FILE",
                   help="with --scheduler yunikorn: v1.9.0 with this unified diff applied (see `cluster build`)")
    u.add_argument("--yunikorn-source", type=Path, metavar="DIR",
                   help="with --scheduler yunikorn: built from this yunikorn-k8shim checkout")
    u.add_argument("--kube-scheduler-patch", type=Path, metavar="FILE",
                   help="with --scheduler kube-scheduler: its release (--kubernetes) with this unified diff applied to "
                        "k8s.io/kubernetes, built and cached under its own name and hash (see `cluster build`)")


def parser() -> argparse.ArgumentParser:
    """The full command line."""
    p = argparse.ArgumentParser(
        prog="kube-fault-proxy",
        description="A Kubernetes-aware, fault-injecting reverse proxy for scheduler testing.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _serve_args(sub.add_parser("serve", help="run the proxy and its control plane"))

    k = sub.add_parser("kubeconfig", help="write a kubeconfig that reaches a cluster via the proxy")
    k.add_argument("--kubeconfig", type=Path, required=True, help="the real cluster's kubeconfig")
    k.add_argument("--context", help="kubeconfig context (default: current)")
    k.add_argument("--proxy-url", default="https://127.0.0.1:7443", help="the proxy's URL (default https://127.0.0.1:7443)")
    k.add_argument("--ca", type=Path, help="proxy CA certificate (default: the proxy's own)")
    k.add_argument("-o", "--output", type=Path, required=True, help="the kubeconfig to write")

    pr = sub.add_parser("profiles", help="validate or list fault profiles")
    prs = pr.add_subparsers(dest="profiles_command", required=True, metavar="ACTION")
    v = prs.add_parser("validate", help="check profile files; exit 2 on any error")
    v.add_argument("files", nargs="+", type=Path, help="profile files (YAML or JSON)")
    ls = prs.add_parser("list", help="list the profiles in a directory")
    ls.add_argument("--dir", type=Path, metavar="DIR",
                    help="default: ./fault_profiles if it exists, else the library the package ships")

    sub.add_parser("crds", help="print the CustomResourceDefinitions (FaultProfile, FaultActivation) as YAML")
    m = prs.add_parser("manifests", help="print profile files as FaultProfile objects to kubectl apply")
    m.add_argument("files", nargs="+", type=Path, help="profile files (YAML or JSON)")
    m.add_argument("--namespace", help="set metadata.namespace")
    _ctl_args(sub.add_parser("ctl", help="talk to a running proxy's control plane"))
    _cluster_args(sub.add_parser("cluster", help="a local real control plane (kube-apiserver, etcd, schedulers)"))
    from kube_fault_proxy.cli import scenarios, search, standin, workload

    workload.add_arguments(sub)
    standin.add_arguments(sub)
    scenarios.add_arguments(sub)
    search.add_arguments(sub)
    _rich_help(p)
    return p


def _rich_help(p: argparse.ArgumentParser) -> None:
    """--help laid out by rich-argparse, on this parser and every subcommand's (colour only on a terminal)."""
    from rich_argparse import RichHelpFormatter

    p.formatter_class = RichHelpFormatter
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _rich_help(sub)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the kube-fault-proxy command."""
    args = parser().parse_args(argv)
    for name in ("profiles", "dir"):  # one rule for every subcommand: given, else ./fault_profiles, else shipped
        if name in vars(args) and not (name == "dir" and args.command != "profiles"):
            setattr(args, name, shipped.profiles_dir(getattr(args, name)))
    try:
        match args.command:
            case "serve":
                from kube_fault_proxy.cli.serve import run

                return run(args)
            case "kubeconfig":
                from kube_fault_proxy.cli.kubeconfig import run as run_kubeconfig

                return run_kubeconfig(args)
            case "profiles":
                from kube_fault_proxy.cli.profiles import run as run_profiles

                return run_profiles(args)
            case "crds":
                from kube_fault_proxy.proxy.crd.definitions import crds_yaml

                sys.stdout.write(crds_yaml())
                return OK
            case "ctl":
                from kube_fault_proxy.cli.ctl import run as run_ctl

                return run_ctl(args)
            case "cluster":
                from kube_fault_proxy.cli.cluster import run as run_cluster

                return run_cluster(args)
            case "load":
                from kube_fault_proxy.cli.workload import run_load

                return run_load(args)
            case "check":
                from kube_fault_proxy.cli.workload import run_check

                return run_check(args)
            case "scenario" | "report" | "demo":
                from kube_fault_proxy.cli.scenarios import run as run_scenario

                return run_scenario(args)
            case "stand-in":
                from kube_fault_proxy.cli.standin import run as run_standin

                return run_standin(args)
            case "search":
                from kube_fault_proxy.cli.search import run as run_search

                return run_search(args)
    except KeyboardInterrupt:
        return FAILED
    print(f"unknown command {args.command}", file=sys.stderr)
    return USAGE
