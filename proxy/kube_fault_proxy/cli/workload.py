"""`load pods|dra|gang|clean` and `check`: drive a cluster and judge it."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from lightkube import ConfigError

from kube_fault_proxy.cli.exits import FAILED, OK, USAGE
from kube_fault_proxy.kube.kubeapi import SYSTEM_NAMESPACES, HTTPError, Kube
from kube_fault_proxy.rig.console import Progress, show_table
from kube_fault_proxy.rig.controllers.apiserver import snapshot
from kube_fault_proxy.rig.controllers.promises import SNAPSHOT, check_world
from kube_fault_proxy.rig.controllers.world import WORKLOADS
from kube_fault_proxy.rig.invariants import check, devices, excuses, ledger, pod_scheduled
from kube_fault_proxy.rig.workloads import dra, gang, load, shapes


def _kube(args: argparse.Namespace) -> Kube:
    path = args.kubeconfig or Path(os.environ.get("KUBECONFIG", str(Path.home() / ".kube" / "config")))
    return Kube.from_kubeconfig(path, args.context)


def run_load(args: argparse.Namespace) -> int:
    """Create or clean up load pods."""
    try:
        kube = _kube(args)
        if args.load_command == "clean":
            with kube.client() as client:
                deleted = load.clean(client, args.namespace, args.run_id)
            gone = "" if args.run_id or args.namespace in SYSTEM_NAMESPACES else f" with namespace {args.namespace}"
            print(f"deleted {deleted} pods{gone}")
            return OK
        if args.load_command == "gang":
            return _load_gang(kube, args)
        if args.load_command == "dra":
            return _load_dra(kube, args)
        labels = dict(label.split("=", 1) for label in args.label)
        spec = load.LoadSpec(count=args.count, rate=args.rate, concurrency=args.concurrency, namespace=args.namespace,
                             scheduler_name=args.scheduler_name, cpu=args.cpu, memory=args.memory, labels=labels,
                             app_id=args.app_id, timeout=args.timeout)
        result = load.create_pods(kube, spec)
    except (ConfigError, ValueError) as e:
        print(f"kube-fault-proxy load: {e}", file=sys.stderr)
        return USAGE
    except HTTPError as e:
        print(f"kube-fault-proxy load: the apiserver refused: {e}", file=sys.stderr)
        return FAILED
    r = result.as_dict()
    print(f"created {r['created']}/{r['requested']} pods in {r['seconds']}s ({r['ratePerSecond']}/s), "
          f"failed {r['failed']} {r['errors'] or ''}; run id {r['runId']} "
          f"(label {load.LOAD_LABEL}={r['runId']})")
    return OK if result.failed == 0 and not result.timed_out else FAILED


def _load_dra(kube: Kube, args: argparse.Namespace) -> int:
    """`load dra`: the dra shape's devices published on every node, its pods created; with binding conditions,
    the rig's driver marks each allocated device ready until every pod is bound or the timeout passes."""
    with kube.client() as client:
        nodes = dra.node_names(client)
        if not nodes:
            raise ValueError("the cluster has no nodes to publish devices for")
        workload = shapes.generate("dra", len(nodes), args.count, args.seed)
        dra.publish(client, nodes, [n.devices for n in workload.nodes], [args.namespace], args.binding_conditions)
    print(f"published {sum(n.devices for n in workload.nodes)} devices of {dra.DRIVER} on {len(nodes)} nodes"
          f"{' with binding conditions' if args.binding_conditions else ''}")
    spec = load.LoadSpec(count=args.count, rate=args.rate, namespace=args.namespace,
                         scheduler_name=args.scheduler_name, timeout=args.timeout, pods=workload.pods)
    if not args.binding_conditions:
        result = load.create_pods(kube, spec)
        print(f"created {result.created}/{result.requested} pods claiming "
              f"{sum(p.devices for p in workload.pods)} devices; run id {result.run_id}")
        return OK if result.failed == 0 and not result.timed_out else FAILED
    with dra.Driver(kube, [args.namespace]) as driver:
        result = load.create_pods(kube, spec)
        left = load.wait_bound(kube, args.namespace, result.run_id, args.timeout)
    print(f"created {result.created}/{result.requested} pods; {left} unbound; the driver made {driver.written} "
          f"claims ready; run id {result.run_id}")
    return OK if result.failed == 0 and left == 0 else FAILED


def _load_gang(kube: Kube, args: argparse.Namespace) -> int:
    """`load gang`: a Workload, its gang PodGroup and the members, created `--interval` seconds apart."""
    with kube.client() as client:
        names = gang.create_gang(client, args.namespace, args.name, args.min_count, args.members, args.cpu,
                                 args.interval, args.scheduler_name)
    print(f"created Workload and PodGroup {args.namespace}/{args.name} (minCount {args.min_count}) and "
          f"{len(names)} members (label {shapes.GANG_LABEL}={args.name})")
    return OK


def run_check(args: argparse.Namespace) -> int:
    """Wait for quiet, evaluate the invariants, print the table, write JSON; exit 1 on violations."""
    try:
        kube = _kube(args)
    except ConfigError as e:
        print(f"kube-fault-proxy check: {e}", file=sys.stderr)
        return USAGE
    schedulers = set(args.scheduler_name)
    with Progress("waiting for quiet") as bar:
        def tick(snap: check.Snapshot) -> None:
            mine = [p for p in snap.pods if p["spec"].get("schedulerName", "default-scheduler") in schedulers]
            bar.update(sum(1 for p in mine if p["spec"].get("nodeName")), len(mine), "pods bound")

        with kube.client() as client:
            snap, quiet = check.wait_quiet(lambda: check.fetch(client, args.yunikorn), args.quiet, args.wait, tick)
            world = snapshot(client, args.namespace)  # the workloads as they are once the pods went quiet
            claims = dra.claims_and_slices(client)  # None where the apiserver serves no resource.k8s.io/v1
    report = judged(snap, schedulers, args.grace, args.namespace)
    if (note := unjudged(snap.pods, schedulers, args.namespace)) is not None:
        print(f"kube-fault-proxy check: {note}", file=sys.stderr)
    report.checked += [*SNAPSHOT, pod_scheduled.NAME]
    report.violations += check_world(world, args.namespace)
    report.violations += pod_scheduled.check_scheduled(snap.pods, schedulers, args.namespace)
    report.counts["workloads"] = sum(len(world.objects[kind]) for kind in WORKLOADS)
    if claims is not None:
        report.checked += list(devices.NAMES)
        for namespace in args.namespace or [None]:
            report.violations += [v for v in devices.check_devices(snap.pods, *claims, namespace)
                                  if v not in report.violations]
        report.counts["claims"] = len(claims[0])
    report.quiet = quiet
    said: list[str] = []
    if args.journal is not None:
        try:
            book = ledger.read_file(args.journal)
        except (OSError, ledger.LedgerError) as e:
            print(f"kube-fault-proxy check: --journal: {e}", file=sys.stderr)
            return USAGE
        if args.namespace:
            book = ledger.Ledger(tuple(e for e in book.effects if e.touched.namespace in ("", *args.namespace)))
        said = excuses.excuse_report(report, book)
    show_table(check.TABLE_HEADERS, check.table_rows(report), check.render(report), caption=check.verdict_line(report))
    if said:
        print("\n".join(["the proxy's journal:", *(f"  {line}" for line in said)]))
    if args.output:
        args.output.write_text(json.dumps(report.as_dict(), indent=1))
    return OK if report.ok else FAILED


def unjudged(pods: list[dict[str, Any]], schedulers: set[str], namespaces: list[str]) -> str | None:
    """With no --scheduler-name no pod is judged by the scheduler invariants, and the verdict reads clean: what
    to say about the pods in scope then (None when schedulers were named, or there is no pod)."""
    if schedulers:
        return None
    names = Counter(p["spec"].get("schedulerName", "default-scheduler") for p in pods
                    if not namespaces or p["metadata"].get("namespace") in namespaces)
    if not names:
        return None
    found = ", ".join(f"{name} ({n} pod{'' if n == 1 else 's'})" for name, n in sorted(names.items()))
    return (f"no --scheduler-name, so no pod was judged by the scheduler invariants (stranded, safety, I1-I5); "
            f"the pods here name {found}")


def judged(snap: check.Snapshot, schedulers: set[str], grace: float, namespaces: list[str]) -> check.Report:
    """The scheduler invariants on the whole cluster, or on each namespace given (a break that involves pods of
    two of them counted once)."""
    if not namespaces:
        return check.evaluate(snap, schedulers, grace)
    reports = [check.evaluate(snap, schedulers, grace, ns) for ns in dict.fromkeys(namespaces)]
    merged = check.Report(checked=reports[0].checked)
    for r in reports:
        merged.violations += [v for v in r.violations if v not in merged.violations]
        for key, value in r.counts.items():
            merged.counts[key] = value if key == "nodes" else merged.counts.get(key, 0) + value
    return merged


def add_arguments(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """The `load` and `check` subcommands."""
    _add_load(sub)
    _add_check(sub)


def _add_target(p: argparse.ArgumentParser) -> None:
    """The cluster a subcommand works on: a kubeconfig and its context."""
    p.add_argument("--kubeconfig", type=Path, help="default: $KUBECONFIG or ~/.kube/config")
    p.add_argument("--context", help="kubeconfig context (default: current)")


def _add_load(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    lp = sub.add_parser("load", help="create pods at a rate (bounded), or clean them up")
    lsub = lp.add_subparsers(dest="load_command", required=True, metavar="ACTION")
    pods = lsub.add_parser("pods", help="create pods")
    _add_target(pods)
    pods.add_argument("--count", type=int, default=100, help="pods to create (default 100)")
    pods.add_argument("--rate", type=float, default=100.0, help="pods per second")
    pods.add_argument("--concurrency", type=int, default=8, help="creations in flight")
    pods.add_argument("--namespace", default="default", help="where the pods go (created if missing)")
    pods.add_argument("--scheduler-name", default="default-scheduler", help="the pods' spec.schedulerName")
    pods.add_argument("--cpu", default="100m", help="each pod's cpu request (default 100m)")
    pods.add_argument("--memory", default="64Mi", help="each pod's memory request (default 64Mi)")
    pods.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="an extra label (repeatable)")
    pods.add_argument("--app-id", help="YuniKorn application id (label applicationId)")
    pods.add_argument("--timeout", type=float, default=600.0, help="stop creating after this many seconds")
    dp = lsub.add_parser("dra", help="publish devices of a fake DRA driver on every node (a DeviceClass, a "
                                     "ResourceSlice per node, ResourceClaimTemplates) and create pods that claim 1-4 "
                                     "of them (needs kube-controller-manager's resourceclaim-controller)")
    _add_target(dp)
    dp.add_argument("--count", type=int, default=20, help="pods to create (default 20)")
    dp.add_argument("--rate", type=float, default=20.0, help="pods per second")
    dp.add_argument("--namespace", default="default", help="where the pods, claims and templates go")
    dp.add_argument("--scheduler-name", default="default-scheduler", help="the pods' spec.schedulerName")
    dp.add_argument("--seed", type=int, default=0, help="how many devices each pod claims is drawn from this")
    dp.add_argument("--binding-conditions", action="store_true",
                    help="devices wait for a Ready condition before binding; the command plays the driver and sets "
                         "it until every pod is bound or --timeout passes")
    dp.add_argument("--timeout", type=float, default=120.0, help="seconds for creating (and binding) the pods")
    gp = lsub.add_parser("gang", help="create a Workload, a gang PodGroup with minCount and its members over "
                                      "time (needs scheduling.k8s.io/v1beta1, GenericWorkload on every component and "
                                      "kube-controller-manager's podgroup-protection-controller)")
    _add_target(gp)
    gp.add_argument("--name", default="gang", help="the Workload's and PodGroup's name (default gang)")
    gp.add_argument("--namespace", default="default", help="where they go")
    gp.add_argument("--min-count", type=int, default=4, help="the gang's minCount (default 4)")
    gp.add_argument("--members", type=int, default=4, help="member pods to create (default 4)")
    gp.add_argument("--cpu", default="100m", help="each member's cpu request (default 100m)")
    gp.add_argument("--interval", type=float, default=1.0, help="seconds between two members (default 1)")
    gp.add_argument("--scheduler-name", default="default-scheduler", help="the members' spec.schedulerName")
    clean = lsub.add_parser("clean", help="delete what a load created: its namespace (the default namespace and "
                                          "other system ones: its pods), or one run's pods; waits until gone")
    _add_target(clean)
    clean.add_argument("--namespace", default="default", help="the load's namespace")
    clean.add_argument("--run-id", help="only this run (default: every run)")


def _add_check(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    cp = sub.add_parser("check", help="check invariants: stranded pods, every scheduler's safety (over-commit, "
                                      "placement, cordons, anti-affinity), phantom allocations, what the workload "
                                      "controllers promise (ReplicaSets, Deployments, Jobs, StatefulSets, "
                                      "DaemonSets), what DRA promises (devices allocated once, bound pods' claims "
                                      "reserved) (exit 1 on violation)")
    _add_target(cp)
    cp.add_argument("--scheduler-name", action="append", default=[],
                    help="whose pods the scheduler invariants judge (repeatable; none given: no pod is, and the check "
                         "says which schedulers the pods name)")
    cp.add_argument("--yunikorn", metavar="URL", help="YuniKorn REST, e.g. http://127.0.0.1:9080 (enables I1-I5)")
    cp.add_argument("--quiet", type=float, default=10.0, help="seconds without change that count as quiet")
    cp.add_argument("--wait", type=float, default=120.0, help="give up waiting for quiet after this long")
    cp.add_argument("--grace", type=float, default=30.0, help="a younger Pending pod is not stranded yet")
    cp.add_argument("--namespace", action="append", default=[], metavar="NAME",
                    help="judge only this namespace's pods and workloads (repeatable; default: every namespace)")
    cp.add_argument("-o", "--output", type=Path, help="write the report as JSON")
    cp.add_argument("--journal", type=Path, metavar="FILE",
                    help="the proxy's journal (--journal of serve) for the run: a break its effects excuse (a pod "
                         "stranded because its ADDED event, or that of every node with room for it, was dropped, a "
                         "Job's extra success after a pod create committed unanswered) is shown as the faults' "
                         "effect, not a violation")
