"""`search --on-cluster` (a campaign: N workers as an Indexed Job, their hits confirmed, shrunk and reported here),
`search --worker` (one of them, in its pod) and `search --print-job` (the Job, for kubectl)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import yaml

from kube_fault_proxy.cli.exits import OK, USAGE
from kube_fault_proxy.rig.console import stderr_console
from kube_fault_proxy.rig.search import campaign as campaigns
from kube_fault_proxy.rig.search.job_manifest import WORKER_IMAGE, Campaign, job, worker_seed
from kube_fault_proxy.rig.search.on_cluster import JobFollower, Kubectl
from kube_fault_proxy.rig.search.outcome import Outcome, Settings


def add_campaign_arguments(p: argparse.ArgumentParser) -> None:
    """The campaign's options of `search`."""
    g = p.add_argument_group("a campaign on a cluster (a Kubernetes Job of workers)")
    g.add_argument("--on-cluster", action="store_true",
                   help="run the search phase as --workers pods of an Indexed Job in the cluster of --kubeconfig "
                        "(worker i: seed --seed + i, --budget each, on a control plane inside its pod), then confirm, "
                        "shrink and report their hits here, saying which trials ran on which pod")
    g.add_argument("--kubeconfig", type=Path, metavar="FILE", help="the campaign's cluster (default: kubectl's)")
    g.add_argument("--workers", type=int, default=2, metavar="N",
                   help="completion indexes: worker searches (default 2)")
    g.add_argument("--parallelism", type=int, metavar="N", help="worker pods at once (default: all)")
    g.add_argument("--retries-per-index", type=int, default=1, metavar="N",
                   help="backoffLimitPerIndex: a failed or evicted worker is run again this often (default 1)")
    g.add_argument("--image", default=WORKER_IMAGE, help=f"the worker image (default {WORKER_IMAGE}: "
                                                         "scripts/search-worker-image)")
    g.add_argument("--namespace", default="default", help="the Job's namespace (default default)")
    g.add_argument("--job-name", metavar="NAME", help="the Job's name (default kfp-search-<seed>)")
    g.add_argument("--node-selector", action="append", default=[], metavar="KEY=VALUE",
                   help="where the workers may run (repeatable), e.g. type=real")
    g.add_argument("--worker-cpu", default="500m", help="cpu each worker pod requests (default 500m)")
    g.add_argument("--worker-memory", default="1536Mi",
                   help="memory each worker pod requests and is limited to (default 1536Mi)")
    g.add_argument("--keep-job", action="store_true", help="leave the Job and its pods when done (default: delete)")
    g.add_argument("--print-job", action="store_true", help="print the campaign's Job as YAML and exit")
    g.add_argument("--worker", action="store_true",
                   help="be one worker of a campaign Job (its index from JOB_COMPLETION_INDEX): search only, "
                        "each trial's record in the log")


def campaign_of(s: Settings, args: argparse.Namespace) -> Campaign:
    """The Job's shape from the options (ValueError when they do not fit)."""
    selector = {}
    for item in args.node_selector:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"--node-selector {item!r}: KEY=VALUE")
        selector[key] = value
    return Campaign(name=args.job_name or f"kfp-search-{s.seed}", namespace=args.namespace, workers=args.workers,
                    parallelism=args.parallelism, retries_per_index=args.retries_per_index, image=args.image,
                    cpu=args.worker_cpu, memory=args.worker_memory, node_selector=selector)


def run(s: Settings, args: argparse.Namespace, summary: Callable[[Outcome, Settings], int]) -> int:
    """Dispatch the worker, the Job's printout, or the coordinator."""
    if args.worker:
        return worker(s)
    try:
        c = campaign_of(s, args)
    except ValueError as e:
        print(f"kube-fault-proxy search: {e}", file=sys.stderr)
        return USAGE
    if args.print_job:
        print(yaml.safe_dump(job(s, c), sort_keys=False), end="")
        return OK
    return coordinate(s, c, args, summary)


def worker(s: Settings) -> int:
    """One worker: seed + JOB_COMPLETION_INDEX, the search phase only, every record on stdout."""
    try:
        index = int(os.environ.get("JOB_COMPLETION_INDEX", "0"))
    except ValueError:
        print("kube-fault-proxy search --worker: JOB_COMPLETION_INDEX is not a number", file=sys.stderr)
        return USAGE
    mine = replace(s, seed=worker_seed(s.seed, index), control=None, fresh=True)
    console = stderr_console()

    def emit(line: str) -> None:
        print(line, flush=True)

    search = campaigns.WorkerSearch(mine, index, os.environ.get("POD_NAME"), os.environ.get("NODE_NAME"),
                                    lambda m: console.print(m, markup=False, soft_wrap=True), emit)
    console.print(f"worker {index}: seed {mine.seed}, {mine.budget:.0f} s", markup=False)
    out = search.run()
    if out.interrupted:
        return 128 + signal.Signals[out.interrupted].value
    emit(search.closing(out))
    return OK


def coordinate(s: Settings, c: Campaign, args: argparse.Namespace,
               summary: Callable[[Outcome, Settings], int]) -> int:
    """Run the Job, then the coordinator over what its pods recorded."""
    from kube_fault_proxy.rig.search.output import write

    console = stderr_console()

    def note(m: str) -> None:
        console.print(m, markup=False, soft_wrap=True)

    follower = JobFollower(Kubectl(args.kubeconfig), c, note)
    try:
        ran = follower.follow(s)
    finally:
        if not args.keep_job:
            follower.delete()
    workers = campaigns.worker_records(ran.attempts, s.seed, c.workers)
    s.out.mkdir(parents=True, exist_ok=True)
    (s.out / "job.json").write_text(json.dumps(job(s, c), indent=1))

    def checkpoint(o: Outcome) -> None:
        write(o, sys.argv)
        campaigns.write_campaign(o, workers, ran.attempts, c, ran.seconds)

    out = campaigns.Coordinator(s, workers, c, ran.seconds, note, checkpoint=checkpoint).run()
    print(f"campaign {c.name}: {ran.ended}; " + "; ".join(
        f"index {w.index} ({w.attempt.pod} on {w.attempt.node}): {w.steps} steps" for w in workers))
    unfinished = sorted(set(range(c.workers)) - {w.index for w in workers if w.attempt.complete})
    if unfinished:  # the verdict below covers only the trials that came back
        print(f"campaign {c.name}: index(es) {', '.join(map(str, unfinished))} did not finish their search "
              "(no attempt closed its log): the report covers the trials that came back", file=sys.stderr)
    return summary(out, s)
