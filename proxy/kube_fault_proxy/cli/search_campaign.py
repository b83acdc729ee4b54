"""`search --on-cluster` (a campaign: N workers as an Indexed Job, their hits confirmed, shrunk and reported here),
`search --worker` (one of them, in its pod) and `search --print-job` (the Job, for kubectl)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from kube_fault_proxy.cli.exits import OK, USAGE
from kube_fault_proxy.rig.console import stderr_console
from kube_fault_proxy.rig.search import campaign as campaigns
from kube_fault_proxy.rig.search.job_manifest import WORKER_IMAGE, Campaign, job, worker_rbac, worker_seed
from kube_fault_proxy.rig.search.on_cluster import CampaignError, JobFollower, Kubectl
from kube_fault_proxy.rig.search.outcome import Outcome, Settings

INCOMPLETE = 3  # nothing confirmed, but an index of the Job never finished its search: the verdict is partial


def add_campaign_arguments(p: argparse.ArgumentParser) -> None:
    """The campaign's options of `search`."""
    g = p.add_argument_group("a campaign on a cluster (a Kubernetes Job of workers)")
    g.add_argument("--on-cluster", action="store_true",
                   help="run the search phase as --workers pods of an Indexed Job in the cluster of --kubeconfig "
                        "(worker i: seed --seed + i, --budget each, on a control plane inside its pod), then confirm, "
                        "shrink and report their hits here, saying which trials ran on which pod; exit 3 when "
                        "nothing was confirmed but an index never finished its search")
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
    g.add_argument("--worker-service-account", metavar="NAME",
                   help="the ServiceAccount the worker pods run as; it must be allowed to get the ConfigMaps "
                        "<job>-records-<index> (default: <job>-worker, made with such a Role and RoleBinding)")
    g.add_argument("--keep-job", action="store_true",
                   help="leave the Job, its pods and its records when done (default: delete them once the Job has "
                        "ended; a coordinator stopped earlier leaves the Job running, and running it again attaches "
                        "to it)")
    g.add_argument("--print-job", action="store_true",
                   help="print the workers' ServiceAccount, Role and RoleBinding and the campaign's Job as YAML "
                        "documents, and exit")
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
                    cpu=args.worker_cpu, memory=args.worker_memory, node_selector=selector,
                    service_account=args.worker_service_account)


def run(s: Settings, args: argparse.Namespace, summary: Callable[[Outcome, Settings], int]) -> int:
    """Dispatch the worker, the Job's printout, or the coordinator."""
    if args.worker:
        return worker(s)
    try:
        c = campaign_of(s, args)
    except ValueError as e:
        print(f"kube-fault-proxy search: {e}", file=sys.stderr)
        return USAGE
    if args.print_job:  # the workers' ServiceAccount, Role and RoleBinding first, then the Job
        print(yaml.safe_dump_all([*worker_rbac(c), job(s, c)], sort_keys=False), end="")
        return OK
    return coordinate(s, c, args, summary)


def worker(s: Settings, read_records: Callable[[str, str], str] | None = None) -> int:
    """One worker: seed + JOB_COMPLETION_INDEX, the search phase only, every record on stdout. A retried index
    (JOB_INDEX_FAILURES > 0, or an earlier attempt evicted) resumes from the records the coordinator kept for it."""
    try:
        index = int(os.environ.get("JOB_COMPLETION_INDEX", "0"))
    except ValueError:
        print("kube-fault-proxy search --worker: JOB_COMPLETION_INDEX is not a number", file=sys.stderr)
        return USAGE
    mine = replace(s, seed=worker_seed(s.seed, index), control=None, fresh=True)
    console = stderr_console()

    def note(m: str) -> None:
        console.print(m, markup=False, soft_wrap=True)

    def emit(line: str) -> None:
        print(line, flush=True)

    search = campaigns.WorkerSearch(mine, index, os.environ.get("POD_NAME"), os.environ.get("NODE_NAME"), note, emit)
    failures = os.environ.get("JOB_INDEX_FAILURES") or "0"
    console.print(f"worker {index}: seed {mine.seed}, {mine.budget:.0f} s; the index's failed attempts before this "
                  f"one: {failures}", markup=False)
    job_name, namespace = os.environ.get("JOB_NAME"), os.environ.get("JOB_NAMESPACE", "default")
    if job_name:  # the first attempt too: an evicted one is not counted as a failure, yet its records are kept
        earlier = earlier_of(job_name, namespace, index, mine, note, read_records or records_map_text)
        if earlier:
            search.seq = campaigns.resume_worker(earlier, search.journal, emit)
            search.s = replace(mine, fresh=False)
    out = search.run()
    if out.interrupted:
        return 128 + signal.Signals[out.interrupted].value
    emit(search.closing(out))
    return OK


def records_map_text(namespace: str, name: str) -> str:
    """The records the coordinator keeps for an index (its ConfigMap's `records`), read with the pod's service
    account; empty when the ConfigMap is not there (the coordinator has not seen a record of the index yet)."""
    out = Kubectl(None).run("-n", namespace, "get", "configmap", name, "--ignore-not-found", "-o", "json")
    return str(json.loads(out).get("data", {}).get("records", "")) if out.strip() else ""


def earlier_of(job_name: str, namespace: str, index: int, s: Settings, note: Callable[[str], None],
               read: Callable[[str, str], str]) -> list[dict[str, Any]]:
    """The index's search steps its earlier attempts ran, as the coordinator kept them; none (the search starts
    over, said in the log) when they cannot be read."""
    name = Campaign(name=job_name, namespace=namespace).records_map(index)
    try:
        text = read(namespace, name)
    except (CampaignError, OSError, subprocess.SubprocessError, ValueError) as e:
        note(f"worker {index}: the index's earlier records ({namespace}/{name}) could not be read, so this attempt "
             f"starts its search over: {e}")
        return []
    earlier = campaigns.earlier_records(text, s.seed, s.scheduler)
    if earlier:
        note(f"worker {index}: resuming from {len(earlier)} search steps an earlier attempt ran ({namespace}/{name})")
    return earlier


def coordinate(s: Settings, c: Campaign, args: argparse.Namespace,
               summary: Callable[[Outcome, Settings], int], sleep: Callable[[float], None] = time.sleep) -> int:
    """Make the Job (or attach to it), follow it in a thread, and coordinate what its pods record as it comes:
    each index's hits are confirmed while the Job still runs."""
    from kube_fault_proxy.rig.search.output import write

    console = stderr_console()

    def note(m: str) -> None:
        console.print(m, markup=False, soft_wrap=True)

    def left_running(why: str) -> None:
        note(f"{why}: the job {c.namespace}/{c.name} is left running; the same command attaches to it (and takes "
             f"what its pods have said); to stop it: kubectl -n {c.namespace} delete job {c.name}")

    follower = JobFollower(Kubectl(args.kubeconfig), c, note)
    age = follower.start(s)
    t0 = time.monotonic() - age
    stop = threading.Event()
    followed: dict[str, Any] = {}

    def follow() -> None:
        try:
            followed["run"] = follower.watch(s, t0, sleep=sleep, stop=stop)
        except Exception as e:  # kubectl failed: the coordinator ends with what came back
            followed["error"] = e

    thread = threading.Thread(target=follow, name="job-follower", daemon=True)
    thread.start()
    feed = campaigns.Feed(lambda: (follower.attempts(), not thread.is_alive()), s.seed, c.workers, sleep, note)
    s.out.mkdir(parents=True, exist_ok=True)
    (s.out / "job.json").write_text(json.dumps(job(s, c), indent=1))

    def checkpoint(o: Outcome) -> None:
        write(o, sys.argv)
        campaigns.write_campaign(o, feed.workers(), follower.attempts(), c, time.monotonic() - t0)

    try:
        out = campaigns.Coordinator(s, feed, c, age, note, checkpoint=checkpoint).run()
    finally:
        if thread.is_alive():  # interrupted, or the coordinator failed, before the Job ended
            stop.set()
        thread.join()
    ran = followed.get("run")
    if "error" in followed or out.interrupted or ran is None or ran.ended == "stopped":
        left_running(str(followed.get("error") or f"interrupted by {out.interrupted}"))
    elif not args.keep_job:
        follower.delete()
    checkpoint(out)  # the attempts as they ended
    workers = feed.workers()
    print(f"campaign {c.name}: {ran.ended if ran else 'not followed to its end'}; " + "; ".join(
        f"index {w.index} ({w.attempt.pod} on {w.attempt.node}): {w.steps} steps" for w in workers))
    verdict = summary(out, s)
    missing = campaigns.unfinished([a.as_dict() for a in follower.attempts()], c.workers)
    if missing and not out.interrupted:  # the verdict covers only the trials that came back
        print(campaigns.unfinished_message(c.name, missing), file=sys.stderr)
        return INCOMPLETE if verdict == OK else verdict  # a confirmed violation (1) stays
    return verdict
