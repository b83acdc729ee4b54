"""Stall detection: how long a client takes to notice a silent watch or a silent connection, and to recover.

One run per invocation: a fresh local control plane (`kube-fault-proxy cluster up --proxy`, the target alone
going through the proxy), a profile activated over the control API, then work, then `cluster down`.

  stallStream      the target's apiserver connection is reset at its first write (a Binding for a scheduler, a
                   pod create for kube-controller-manager), so its informers open their watches again; the next
                   pods watch of the target goes silent (`afterEvents`) for `--for` seconds.
  stallConnection  the target's connection that carries that first write goes silent both ways for `--for`
                   seconds (PINGs unanswered); client-go's HTTP/2 health check should close it after ~45 s.

Then the work: 3 pods for a scheduler (done: all bound), a ReplicaSet of 3 for kube-controller-manager (done: its
3 pods exist and its status counts them). Measured from the stall's start (the journal's `watch-event stalled`, or
the stallConnection injection): when the target noticed (its next pods list or watch, journaled by a marker rule
that delays the target's pods lists and watches by 1 ms, and seen in `/v1/stats` requestsByResource), when it
opened a new connection (`/v1/stats` connections.clientAccepted), when the stall ended and why (`stall-end`), and
when the work was done (polled straight from the apiserver, not through the proxy). The target's log lines
written meanwhile that mention watches, connections or errors are kept. Every wait is bounded.

`--table FILE` prints the record's table from a results file.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KFP = Path(sys.executable).parent / "kube-fault-proxy"
KINDS = ("stallStream", "stallConnection")
MAX_FOR = {"stallStream": 240, "stallConnection": 180}  # the brief's bounds, seconds
NAMESPACE = "stall"
WORK = 3
MARKER = "mark-pods-list-watch"
POD_REQUESTS = ("list pods", "watch pods", "watch pods (sendInitialEvents)")
LOG_WORDS = re.compile(r"watch|reflector|http2|connection|timeout|timed out|EOF|GOAWAY|ping|health|error|fail"
                       r"|refused|replicas|unable", re.IGNORECASE)
MAX_LOG_LINES = 80  # kept: the first and the last half of the matching lines


@dataclass(frozen=True)
class Target:
    """One client under test: its user agents, the write that triggers the fault, how `up` starts it."""

    name: str
    user_agent: str  # glob of every request it makes
    informer_agent: str  # glob of the client its pod informer uses
    trigger: dict[str, list[str]]  # the selector of its first write
    up_args: tuple[str, ...]
    log: str  # its log under <state-dir>/logs


TARGETS = {
    "kube-scheduler": Target("kube-scheduler", "kube-scheduler/*", "kube-scheduler/*",
                             {"verbs": ["create"], "resources": ["pods"], "subresources": ["binding"]},
                             ("--scheduler", "kube-scheduler"), "kube-scheduler"),
    "yunikorn": Target("yunikorn", "yunikorn-scheduler/*", "yunikorn-scheduler/*",
                       {"verbs": ["create"], "resources": ["pods"], "subresources": ["binding"]},
                       ("--scheduler", "yunikorn"), "yunikorn"),
    # Its informers use the root client (user agent .../shared-informers); its controllers their own
    # (.../system:serviceaccount:kube-system:<controller>, --use-service-account-credentials).
    "kube-controller-manager": Target("kube-controller-manager", "kube-controller-manager/*",
                                      "kube-controller-manager/*/shared-informers",
                                      {"verbs": ["create"], "resources": ["pods"], "subresources": [""]},
                                      ("--scheduler", "none", "--through-proxy", "kube-controller-manager",
                                       "--workload-controllers"), "kube-controller-manager"),
}


def rules(target: Target, kind: str, seconds: int, after_events: int) -> list[dict[str, Any]]:
    """The profile's rules for one run: the fault, then the marker that journals the target's pod relists."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: must be one of {', '.join(KINDS)}")
    if not 1 <= seconds <= MAX_FOR[kind]:
        raise ValueError(f"--for {seconds}: {kind} runs last 1..{MAX_FOR[kind]} s")
    trigger = {"userAgents": [target.user_agent], **target.trigger}
    marker = {"name": MARKER, "match": {"userAgents": [target.informer_agent], "verbs": ["list", "watch"],
                                        "resources": ["pods"]},
              "fault": {"delay": {"seconds": 0.001}}}
    if kind == "stallConnection":
        return [{"name": "stall-at-first-write", "match": trigger, "when": {"maxInjections": 1},
                 "fault": {"stallConnection": {"for": f"{seconds}s"}}}, marker]
    return [{"name": "reset-at-first-write", "match": trigger, "when": {"maxInjections": 1},
             "fault": {"resetUpstream": {}}},
            {"name": "stall-next-pods-watch",
             "match": {"userAgents": [target.informer_agent], "verbs": ["watch"], "resources": ["pods"]},
             "when": {"maxInjections": 1, "trigger": {"match": trigger, "count": 1}},
             "fault": {"stallStream": {"afterEvents": after_events, "for": f"{seconds}s"}}},
            marker]


# -- what the journal and the stats samples say (pure) ----------------------------------------------------------

def stall_start(records: list[dict[str, Any]], kind: str) -> float | None:
    """Wall time the stall began: a stalled watch's `watch-event`, or the stallConnection injection."""
    for r in records:
        if kind == "stallStream" and r.get("event") == "watch-event" and r.get("action") == "stalled":
            return float(r["time"])
        if kind == "stallConnection" and r.get("event") == "inject" and r.get("fault") == "stallConnection":
            return float(r["time"])
    return None


def stall_end(records: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    """The stall's `stall-end` record: when, why, how long it was silent."""
    want = "stream" if kind == "stallStream" else "connection"
    for r in records:
        if r.get("event") == "stall-end" and r.get("stall") == want:
            return {"time": float(r["time"]), "reason": r.get("reason"), "stalledSeconds": r.get("stalledSeconds")}
    return None


def relists_after(records: list[dict[str, Any]], since: float) -> list[dict[str, Any]]:
    """The target's pod lists and watches the marker journaled after `since`, oldest first."""
    out = []
    for r in records:
        if r.get("event") == "inject" and r.get("rule") == MARKER and float(r["time"]) > since:
            req = r.get("request", {})
            out.append({"time": float(r["time"]), "verb": req.get("verb"),
                        "sendInitialEvents": bool(req.get("sendInitialEvents")),
                        "resourceVersion": req.get("resourceVersion"), "userAgent": req.get("userAgent")})
    return out


def pod_requests(stats: dict[str, Any]) -> int:
    """Pod lists and watches the proxy counted (requestsByResource)."""
    by = stats.get("requestsByResource", {})
    return sum(int(by.get(k, 0)) for k in POD_REQUESTS)


def first_growth(samples: list[dict[str, Any]], since: float, field: str) -> float | None:
    """Time of the first sample after `since` whose `field` grew past the first sample taken at or after `since`
    (that one already counts the request the stall began on)."""
    later = [s for s in samples if s["time"] >= since]
    if not later:
        return None
    base = later[0][field]
    return next((s["time"] for s in later[1:] if s[field] > base), None)


def since(t: float | None, start: float | None) -> float | None:
    """Seconds from the stall's start, 0.1 s resolution."""
    return None if t is None or start is None else round(t - start, 1)


def summarize(run: dict[str, Any]) -> dict[str, Any]:
    """The figures of one run, in seconds from the stall's start."""
    records, samples, kind = run["journal"], run["samples"], run["kind"]
    start = stall_start(records, kind)
    end = stall_end(records, kind)
    relists = relists_after(records, start) if start is not None else []
    noticed = relists[0]["time"] if relists else None
    return {
        "stallStarted": start is not None,
        # the target relisted while the stall lasted: it noticed by itself, not because the stall ended
        "noticedDuringStall": noticed is not None and (end is None or noticed < end["time"]),
        "noticedByJournal": since(noticed, start),
        "firstRelist": relists[0] if relists else None,
        "noticedByStats": since(first_growth(samples, start, "podRequests") if start is not None else None, start),
        "newConnection": since(first_growth(samples, start, "clientAccepted") if start is not None else None,
                               start),
        "stallEnd": None if end is None else {**end, "at": since(end["time"], start)},
        "workCreated": since(run["work"].get("createdAt"), start),
        "workDone": since(run["work"].get("doneAt"), start),
        "workObserved": since(run["work"].get("observedAt"), start),
    }


def load_results(path: Path) -> dict[str, Any]:
    """A results file this script wrote; ValueError naming the file and the field that is wrong."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise ValueError(f"{path}: runs: missing or not a list")
    for i, run in enumerate(data["runs"]):
        for field, kind in (("target", str), ("kind", str), ("journal", list), ("samples", list), ("work", dict)):
            if not isinstance(run, dict) or not isinstance(run.get(field), kind):
                raise ValueError(f"{path}: runs[{i}].{field}: missing or not a {kind.__name__}")
        if run["kind"] not in KINDS:
            raise ValueError(f"{path}: runs[{i}].kind: {run['kind']!r} is not one of {', '.join(KINDS)}")
    return data


def table(data: dict[str, Any]) -> str:
    """The record's figures: one row per run."""
    def s(v: Any) -> str:
        return "—" if v is None else f"{v} s"
    lines = ["| target | release | kind | for | noticed (journal / stats) | new connection | stall ended | "
             "work created | work done |", "|---|---|---|---|---|---|---|---|---|"]
    for run in data["runs"]:
        if run.get("error"):
            lines.append(f"| {run['target']} | {run.get('kubernetes')} | {run['kind']} | {run.get('forSeconds')} s "
                         f"| run failed: {run['error']} | | | | |")
            continue
        f = summarize(run)
        end = f["stallEnd"]
        ended = "—" if end is None else f"{s(end['at'])} ({end['reason']})"
        lines.append(f"| {run['target']} | {run.get('kubernetes')} | {run['kind']} | {run.get('forSeconds')} s | "
                     f"{s(f['noticedByJournal'])} / {s(f['noticedByStats'])} | {s(f['newConnection'])} | {ended} | "
                     f"{s(f['workCreated'])} | {s(f['workDone'])} |")
    return "\n".join(lines)


def log_excerpt(text: str) -> dict[str, Any]:
    """The log lines that mention watches, connections or errors (the first and the last MAX_LOG_LINES / 2 of
    them, each cut at 300 characters)."""
    lines = text.splitlines()
    hits = [line[:300] for line in lines if LOG_WORDS.search(line)]
    half = MAX_LOG_LINES // 2
    kept = hits if len(hits) <= MAX_LOG_LINES else hits[:half] + hits[-half:]
    return {"lines": len(lines), "matching": len(hits), "excerpt": kept}


# -- one run on a real control plane --------------------------------------------------------------------------

def sh(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """A command, bounded in time; its output kept."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def pod(name: str, scheduler: str, labels: dict[str, str]) -> dict[str, Any]:
    """A small pause pod for a scheduler to place."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}


def replica_set(name: str, replicas: int) -> dict[str, Any]:
    """A ReplicaSet of pause pods no scheduler is asked to place (kube-controller-manager's work only)."""
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"schedulerName": "none", "terminationGracePeriodSeconds": 0,
                                           "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}}


class Rig:
    """The cluster of one run: its admin client, its control client, the samples and the work's times."""

    def __init__(self, state_dir: Path, target: Target) -> None:
        from kube_fault_proxy.kube.kubeapi import ensure_namespace
        from kube_fault_proxy.proxy.control.client import ControlClient
        from kube_fault_proxy.rig.cluster.record import Cluster
        from lightkube.generic_resource import create_namespaced_resource

        self.cluster, self.target = Cluster(state_dir), target
        self.control = ControlClient(self.cluster.control_url, timeout=10)
        self.api = self.cluster.admin_api().client()
        ensure_namespace(self.api, NAMESPACE)
        self.rs_kind = create_namespaced_resource("apps", "v1", "ReplicaSet", "replicasets")
        self.samples: list[dict[str, Any]] = []
        self.work: dict[str, Any] = {}

    def sample(self) -> None:
        stats = self.control.stats()
        self.samples.append({"time": time.time(), "podRequests": pod_requests(stats),
                             "clientAccepted": stats["connections"]["clientAccepted"],
                             "clientOpen": stats["connections"]["clientOpen"]})

    def create(self, doc: dict[str, Any]) -> None:
        from kube_fault_proxy.kube.kubeapi import Pod

        kind = Pod if doc["kind"] == "Pod" else self.rs_kind
        self.api.create(kind.from_dict(doc))

    def scheduler_name(self) -> str:
        return "yunikorn" if self.target.name == "yunikorn" else "default-scheduler"

    def warm_up(self) -> None:
        """The target's first write: the trigger of the fault."""
        if self.target.name == "kube-controller-manager":
            self.create(replica_set("warmup", 1))
        else:
            self.create(pod("warmup", self.scheduler_name(), {"run": "warmup"}))

    def start_work(self) -> None:
        if self.target.name == "kube-controller-manager":
            self.create(replica_set("work", WORK))
        else:
            for i in range(WORK):
                self.create(pod(f"work-{i}", self.scheduler_name(), {"run": "work"}))
        self.work["createdAt"] = time.time()

    def check_work(self) -> None:
        """Record when the work was done: pods bound, or the ReplicaSet's pods created and counted."""
        from kube_fault_proxy.kube.kubeapi import Pod

        now = time.time()
        if self.target.name == "kube-controller-manager":
            pods = list(self.api.list(Pod, namespace=NAMESPACE, labels={"app": "work"}))
            if len(pods) >= WORK and "podsAt" not in self.work:
                self.work["podsAt"] = now
            status = self.api.get(self.rs_kind, "work", namespace=NAMESPACE).get("status") or {}
            if status.get("replicas") == WORK and "observedAt" not in self.work:
                self.work["observedAt"] = now
            if "podsAt" in self.work and "observedAt" in self.work and "doneAt" not in self.work:
                self.work["doneAt"] = now
        else:
            pods = list(self.api.list(Pod, namespace=NAMESPACE, labels={"run": "work"}))
            bound = sum(1 for p in pods if p.get("spec", {}).get("nodeName"))
            self.work["bound"] = bound
            if bound >= WORK and "doneAt" not in self.work:
                self.work["doneAt"] = now


def measure(rig: Rig, kind: str, seconds: int, after_events: int, grace: float) -> dict[str, Any]:
    """Activate, trigger, wait for the stall, start the work, watch until it is done and the stall over."""
    cursor = rig.control.cursor()
    rig.control.activate(f"stall-detection-{kind.lower()}", rules=rules(rig.target, kind, seconds, after_events))
    rig.sample()
    rig.warm_up()
    deadline = time.time() + 60
    start = None
    while start is None and time.time() < deadline:
        time.sleep(0.5)
        rig.sample()
        start = stall_start(rig.control.journal_after(cursor).records, kind)
    if start is None:
        rig.control.deactivate()
        return {"error": "the stall did not begin within 60 s of the warm-up write",
                "journal": rig.control.journal_after(cursor).records}
    rig.start_work()
    deadline = start + seconds + grace
    while time.time() < deadline:
        time.sleep(0.5)
        rig.sample()
        rig.check_work()
        records = rig.control.journal_after(cursor).records
        if "doneAt" in rig.work and stall_end(records, kind) is not None and time.time() > rig.work["doneAt"] + 5:
            break
    rig.control.deactivate()
    rig.sample()
    return {"journal": rig.control.journal_after(cursor).records}


def one_run(args: argparse.Namespace) -> dict[str, Any]:
    target = TARGETS[args.target]
    state_dir = Path(args.state_dir)
    up = [str(KFP), "cluster", "--state-dir", str(state_dir), "up", "--nodes", "5", "--proxy",
          "--kubernetes", args.kubernetes, *target.up_args]
    run: dict[str, Any] = {"target": target.name, "kind": args.kind, "forSeconds": args.for_seconds,
                           "afterEvents": args.after_events if args.kind == "stallStream" else None,
                           "kubernetes": args.kubernetes, "command": up, "startedAt": time.time(),
                           "journal": [], "samples": [], "work": {}}
    try:
        started = sh(up, args.up_timeout)
        run["upSeconds"] = round(time.time() - run["startedAt"], 1)
        if started.returncode != 0:
            run["error"] = f"cluster up failed ({started.returncode}): {started.stderr.strip()[-400:]}"
            return run
        rig = Rig(state_dir, target)
        log = rig.cluster.log(target.log)
        offset = log.stat().st_size if log.exists() else 0
        run["targets"] = rig.cluster.targets
        run.update(measure(rig, args.kind, args.for_seconds, args.after_events, args.grace))
        run["samples"], run["work"] = rig.samples, rig.work
        with log.open(errors="replace") as f:
            f.seek(offset)
            run["log"] = log_excerpt(f.read())
    except Exception as e:  # a failed run is a result: said in the file, and the cluster still goes down
        run["error"] = f"{type(e).__name__}: {e}"
    finally:
        stopped = sh([str(KFP), "cluster", "--state-dir", str(state_dir), "down"], 180)
        run["down"] = stopped.returncode
    if not run.get("error"):
        run["summary"] = summarize(run)
    return run


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", choices=sorted(TARGETS), help="the client under test")
    p.add_argument("--kind", choices=KINDS, help="the fault")
    p.add_argument("--for", dest="for_seconds", type=int, default=120,
                   help="the stall's window in seconds (stallStream <= 240, stallConnection <= 180; default 120)")
    p.add_argument("--after-events", type=int, choices=(0, 1), default=1,
                   help="stallStream: the events the watch delivers before going silent (default 1)")
    p.add_argument("--kubernetes", default="v1.37.2", help="the release `cluster up` runs (default v1.37.2)")
    p.add_argument("--state-dir", default="/tmp/stalltable-run", help="the cluster's own state directory")
    p.add_argument("--grace", type=float, default=60.0,
                   help="seconds past the window to wait for the work (default 60)")
    p.add_argument("--up-timeout", type=float, default=300.0, help="seconds `cluster up` may take (default 300)")
    p.add_argument("-o", "--output", type=Path, help="results file: the run is added to its runs")
    p.add_argument("--table", type=Path, metavar="FILE", help="print the table of a results file and exit")
    args = p.parse_args()
    if args.table:
        print(table(load_results(args.table)))
        return 0
    if not args.target or not args.kind or not args.output:
        p.error("--target, --kind and -o are required for a run")
    try:
        rules(TARGETS[args.target], args.kind, args.for_seconds, args.after_events)
    except ValueError as e:
        p.error(str(e))
    data = load_results(args.output) if args.output.exists() else {"runs": []}
    commit = sh(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], 10).stdout.strip()
    run = one_run(args)
    run["rigCommit"], run["loadAverage"] = commit, os.getloadavg()
    data["runs"].append(run)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps({k: run.get(k) for k in ("target", "kind", "kubernetes", "error", "summary")}, indent=1))
    return 1 if run.get("error") else 0


if __name__ == "__main__":
    sys.exit(main())
