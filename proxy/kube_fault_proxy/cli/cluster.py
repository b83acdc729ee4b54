"""`cluster up|down|status|env|build`: the local real control plane."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from kube_fault_proxy.cli.exits import FAILED, OK, USAGE
from kube_fault_proxy.rig.cluster import build, controller_manager, feature_gates, patches
from kube_fault_proxy.rig.cluster.control_plane import Options, UsageError, down, env, status, up
from kube_fault_proxy.rig.cluster.record import ClusterError, default_state_dir

ALIASES = {"yunikorn": "yunikorn-scheduler"}


def _build(args: argparse.Namespace) -> int:
    names = [ALIASES.get(n, n) for n in args.components] or list(build.ALL)
    unknown = [n for n in names if n not in build.ALL]
    if unknown:
        print(f"kube-fault-proxy cluster build: no component {', '.join(unknown)} "
              f"(there are: yunikorn, {', '.join(build.ALL)})", file=sys.stderr)
        return USAGE
    overrides = build.components(args.kubernetes)
    if args.patch is not None and names == ["kube-scheduler"]:  # kube-scheduler only, of the release asked for
        overrides["kube-scheduler"] = build.kube_scheduler(args.patch, args.kubernetes)
    elif args.patch is not None or args.source is not None:
        if args.components and names != ["yunikorn-scheduler"]:
            print("kube-fault-proxy cluster build: --patch builds yunikorn or kube-scheduler (named alone), "
                  "--source yunikorn only", file=sys.stderr)
            return USAGE
        names = ["yunikorn-scheduler"]
        overrides["yunikorn-scheduler"] = build.yunikorn(args.patch, args.source)
    for name, path in build.build_all(names, overrides=overrides).items():
        print(f"{name}: {path}")
    return OK


def _controllers(args: argparse.Namespace) -> tuple[str, ...]:
    """--controllers (or the default), plus the workload controllers with --workload-controllers."""
    chosen = tuple(args.controllers.split(",")) if args.controllers else controller_manager.CONTROLLERS
    extra = controller_manager.WORKLOAD_CONTROLLERS if args.workload_controllers else ()
    return tuple(dict.fromkeys((*chosen, *extra)))


def _up(args: argparse.Namespace, state_dir: Path) -> int:
    """`cluster up`: a patch named by --kube-scheduler-patch read and parsed before anything starts."""
    if args.kube_scheduler_patch is not None:
        try:
            patches.check_file(args.kube_scheduler_patch, f"--kube-scheduler-patch {args.kube_scheduler_patch}")
        except ValueError as e:
            print(f"kube-fault-proxy cluster: {e}", file=sys.stderr)
            return USAGE
    t0 = time.monotonic()
    print(f"==> starting a local control plane in {state_dir}", file=sys.stderr)
    c = up(Options(state_dir=state_dir, nodes=args.nodes, scheduler=args.scheduler,
                   proxy=args.proxy or bool(args.through_proxy),
                   profile=args.profile, profiles_dir=args.profiles, timeout=args.timeout,
                   node_cpu=args.node_cpu, node_memory=args.node_memory, node_pods=args.node_pods,
                   controllers=_controllers(args),
                   feature_gates=feature_gates.collect(args.feature_gates),
                   through_proxy=tuple(args.through_proxy) if args.through_proxy else None,
                   apiserver_max_streams=args.apiserver_max_streams,
                   proxy_max_streams=args.proxy_max_streams,
                   yunikorn_patch=args.yunikorn_patch, yunikorn_source=args.yunikorn_source,
                   kube_scheduler_patch=args.kube_scheduler_patch,
                   real_node=args.real_node, kubernetes=args.kubernetes,
                   runtime_config=tuple(args.runtime_config)))
    print(f"==> up in {time.monotonic() - t0:.1f}s; `kube-fault-proxy cluster env` prints the exports",
          file=sys.stderr)
    print(env(c.dir))
    return OK


def run(args: argparse.Namespace) -> int:
    """Dispatch one cluster action."""
    state_dir = args.state_dir or default_state_dir()
    try:
        match args.cluster_command:
            case "build":
                return _build(args)
            case "up":
                return _up(args, state_dir)
            case "down":
                stopped = down(state_dir, args.grace)
                print(f"stopped: {', '.join(stopped.names) if stopped.names else 'nothing was running'}")
                if stopped.killed:
                    print(f"needed SIGKILL after {args.grace:g}s: {', '.join(stopped.killed)}")
                if stopped.survivors:
                    print(f"kube-fault-proxy cluster: still running after SIGKILL: {', '.join(stopped.survivors)} "
                          "(see `cluster status`)", file=sys.stderr)
                    return FAILED
            case "status":
                st = status(state_dir)
                print(json.dumps(st, indent=2))
                return OK if st["up"] else FAILED
            case "env":
                print(env(state_dir))
    except build.BuildError as e:
        print(f"kube-fault-proxy cluster: build failed: {e}", file=sys.stderr)
        return USAGE if isinstance(e, build.BuildInputError) else FAILED
    except ValueError as e:  # feature gates that contradict each other
        print(f"kube-fault-proxy cluster: --feature-gates: {e}", file=sys.stderr)
        return USAGE
    except ClusterError as e:
        print(f"kube-fault-proxy cluster: {e}", file=sys.stderr)
        return USAGE if "must be one of" in str(e) or isinstance(e, UsageError) else FAILED
    return OK
