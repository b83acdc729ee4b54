"""WatchList faults and two views on kube-scheduler, kube-controller-manager and YuniKorn: one fresh control plane
per run, and what the target did.

Each run brings up its own control plane (`kube-fault-proxy cluster --state-dir DIR up --nodes 5 ... --proxy`,
the target alone through the proxy), reads the proxy's request counts at start (does the target relist pods
through a WatchList, `watch pods (sendInitialEvents)`, or a `list pods`?), activates a profile over the control
API, forces a relist with a `resetUpstream` on the target's first request in a trigger namespace
(`maxInjections: 1`), creates work, and times it:

- a scheduler (kube-scheduler, YuniKorn): 3 pods, done when all 3 are bound;
- kube-controller-manager: a ReplicaSet of 3 replicas, done when its status shows 3 ready (kube-scheduler
  binds the pods, straight to the apiserver).

`wl-*` runs put one `watchList` mode on every pods watch; the profile stays on until the work is done or
`--fault-seconds` have passed, then is switched off and the work is polled `--off-seconds` more. `tv-*` runs put
`twoViews` on pods and nodes (list, get, watch), with a seed whose first pinned connection gets the lagging view,
and reset the target twice (old connection, current view -> view 1 -> view 0), a batch of work before the first
reset, one between and one after; then `kube-fault-proxy check` judges the namespaces (twoViews runs only).

Every wait is bounded; every control plane is brought down and the host checked with pgrep. Each run holds the
cluster lock (`--lock`) only while its control plane is up, and waits a few seconds between runs so another
waiter can take it. Results: JSON with `-o` (default: printed).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import fcntl
import functools
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KFP = ROOT / ".venv" / "bin" / "kube-fault-proxy"
WORK_NS, T1_NS, T2_NS = "wlv", "wlv-t1", "wlv-t2"
TARGETS = ("kube-scheduler", "kube-controller-manager", "yunikorn")
SCHEDULER_NAMES = {"kube-scheduler": "default-scheduler", "kube-controller-manager": "default-scheduler",
                   "yunikorn": "yunikorn"}
TWO_VIEWS_RULE = "pods-and-nodes-from-two-apiservers"


@dataclass(frozen=True)
class Run:
    """One measured run: a target and the fault its profile puts on it."""

    name: str
    target: str
    kind: str  # "watchList" or "twoViews"
    fault: dict[str, Any]
    fault_seconds: float | None = None  # None: the command line's --fault-seconds

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ValueError(f"run {self.name}: unknown target {self.target!r}")
        if self.kind not in ("watchList", "twoViews"):
            raise ValueError(f"run {self.name}: unknown kind {self.kind!r}")


def _watch_list_runs(short: str, target: str) -> list[Run]:
    return [
        Run(f"wl-{short}-withhold", target, "watchList", {"mode": "withhold"}),
        Run(f"wl-{short}-unannotated", target, "watchList", {"mode": "unannotated"}),
        Run(f"wl-{short}-delay20", target, "watchList", {"mode": "delay", "seconds": 20}),
        Run(f"wl-{short}-truncate-none", target, "watchList", {"mode": "truncate", "afterEvents": 1, "error": "none"}),
        Run(f"wl-{short}-truncate-internal", target, "watchList",
            {"mode": "truncate", "afterEvents": 1, "error": "internal"}),
        # client-go retries an expired WatchList with no backoff: thousands of requests, so 30 s at most
        Run(f"wl-{short}-truncate-expired", target, "watchList",
            {"mode": "truncate", "afterEvents": 1, "error": "expired"}, fault_seconds=30),
    ]


RUNS: dict[str, Run] = {r.name: r for r in [
    *_watch_list_runs("kcm", "kube-controller-manager"),
    *_watch_list_runs("yk", "yunikorn"),
    *_watch_list_runs("ks", "kube-scheduler"),
    Run("tv-ks", "kube-scheduler", "twoViews", {"lagSeconds": 3}),
    Run("tv-kcm", "kube-controller-manager", "twoViews", {"lagSeconds": 3}),
    Run("tv-yk", "yunikorn", "twoViews", {"lagSeconds": 3}),
    # YuniKorn binds a batch in about 3 s, so a 3 s lag hid no write at its relist (2026-12-07): lag by writes
    Run("tv-yk-writes", "yunikorn", "twoViews", {"lagWrites": 5}),
]}


# The target's log lines that show it acting on what it read (kube-controller-manager's ReplicaSet controller;
# a scheduler's failed binds and assumes; client-go's WatchList waits).
LOG_SIGNS = ("Too few replicas", "Too many replicas", "Deleting pod", "already assigned", "can't be assumed",
             "required bookmark", "Plugin Failed")
TARGET_LOGS = {"kube-scheduler": "kube-scheduler", "kube-controller-manager": "kube-controller-manager",
               "yunikorn": "yunikorn"}


def signs(lines: list[str], namespaces: tuple[str, ...] = ("wlv",), most: int = 60) -> dict[str, Any]:
    """The lines (at most `most`) bearing one of LOG_SIGNS that name one of `namespaces` (or none: the WatchList
    waits name no object), and how many there were of each sign."""
    kept = [line for line in lines if any(sign in line for sign in LOG_SIGNS)
            and ("required bookmark" in line or any(f"{ns}/" in line for ns in namespaces))]
    counts = {sign: sum(1 for line in kept if sign in line) for sign in LOG_SIGNS}
    return {"counts": {k: v for k, v in counts.items() if v}, "lines": [line[:400] for line in kept[:most]]}


# -- pure parts (unit-tested) -------------------------------------------------------------------------------------

def up_args(target: str, state_dir: Path, nodes: int, kubernetes: str | None = None) -> list[str]:
    """The `kube-fault-proxy` arguments that bring up a control plane with `target` alone through the proxy."""
    args = ["cluster", "--state-dir", str(state_dir), "up", "--nodes", str(nodes), "--proxy"]
    if target == "kube-controller-manager":
        args += ["--scheduler", "kube-scheduler", "--through-proxy", "kube-controller-manager",
                 "--workload-controllers"]
    else:
        args += ["--scheduler", target]
    if kubernetes:
        args += ["--kubernetes", kubernetes]
    return args


def first_view(seed: int, rule: str) -> int:
    """The view twoViews gives the rule's first client under this seed (its documented draw)."""
    return random.Random(f"{seed}/{rule}/views").randrange(2)


def seed_for_first_view(rule: str, view: int, start: int = 1) -> int:
    """The smallest seed from `start` whose first client gets `view`."""
    if view not in (0, 1):
        raise ValueError(f"a view is 0 or 1, not {view!r}")
    seed = start
    while first_view(seed, rule) != view:
        seed += 1
    return seed


def reset_rule(name: str, target: str, namespace: str) -> dict[str, Any]:
    """A rule that drops the target's apiserver connection once, at its first write in `namespace`: a Binding for
    a scheduler, a pod create for kube-controller-manager."""
    if target == "kube-controller-manager":
        match = {"verbs": ["create"], "resources": ["pods"], "subresources": [""], "namespaces": [namespace]}
    else:
        match = {"verbs": ["create"], "resources": ["pods"], "subresources": ["binding"], "namespaces": [namespace]}
    return {"name": name, "match": match, "when": {"maxInjections": 1}, "fault": {"resetUpstream": {}}}


def profile_rules(run: Run) -> list[dict[str, Any]]:
    """The run's rules: the reset(s) that force relists, then the fault under test."""
    if run.kind == "watchList":
        return [reset_rule("reset-at-trigger", run.target, T1_NS),
                {"name": "watch-list-fault", "match": {"verbs": ["watch"], "resources": ["pods"]},
                 "fault": {"watchList": dict(run.fault)}}]
    return [reset_rule("reset-1", run.target, T1_NS), reset_rule("reset-2", run.target, T2_NS),
            {"name": TWO_VIEWS_RULE, "match": {"verbs": ["list", "get", "watch"], "resources": ["pods", "nodes"]},
             "fault": {"twoViews": dict(run.fault)}}]


def relist_counts(by_resource: dict[str, int]) -> dict[str, int]:
    """The pods requests that tell a WatchList from a LIST in the proxy's `requestsByResource`."""
    return {"watchListPods": by_resource.get("watch pods (sendInitialEvents)", 0),
            "watchPods": by_resource.get("watch pods", 0),
            "listPods": by_resource.get("list pods", 0)}


def journal_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """What a run's journal records say: counts by event, the injections per rule, the watch edits by action, the
    twoViews pins in order and the reads served from the lagging view."""
    events = Counter(r["event"] for r in records)
    injections = Counter(r.get("rule", "?") for r in records if r["event"] == "inject")
    edits = Counter(str(r.get("action")) for r in records if r["event"] == "watch-event")
    pins = [{"time": r["time"], "view": r.get("view"), "client": r.get("client"),
             "clientConnection": r.get("clientConnection"), "connection": r.get("connection")}
            for r in records if r["event"] == "view-pinned"]
    stale = [{"time": r["time"], "verb": r.get("request", {}).get("verb"),
              "resource": r.get("request", {}).get("resource"), "view": r.get("view"),
              "servedResourceVersion": r.get("servedResourceVersion"), "seenSecondsAgo": r.get("seenSecondsAgo"),
              "writesSince": r.get("writesSince"), "servedAs": r.get("servedAs")}
             for r in records if r["event"] == "inject" and r.get("fault") == "twoViews"]
    return {"events": dict(sorted(events.items())), "injectionsByRule": dict(sorted(injections.items())),
            "watchEdits": dict(sorted(edits.items())), "viewPins": pins, "staleReads": stale}


def first_time(records: list[dict[str, Any]], event: str, rule: str) -> float | None:
    """The wall time of the first `event` record of `rule`, or None."""
    return next((r["time"] for r in records if r["event"] == event and r.get("rule") == rule), None)


def parse_end_by(text: str, now: dt.datetime) -> dt.datetime:
    """`HH:MM` (UTC, today or, if already past by more than 12 h, tomorrow) as an aware datetime."""
    try:
        hour, minute = (int(p) for p in text.split(":"))
        when = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--end-by {text!r}: expected HH:MM (UTC)") from None
    if when < now - dt.timedelta(hours=12):
        when += dt.timedelta(days=1)
    return when


def run_budget(run: Run, fault_seconds: float, off_seconds: float) -> float:
    """Seconds to allow one run before a deadline: up (40), namespaces and settling (10), the trigger (30), the
    fault and the switch-off, the check (70), down (20); a twoViews run, its three batches and two resets (150).
    An estimate with a margin, not a bound: the bound is the `timeout` the script runs under."""
    if run.kind == "twoViews":
        return 40 + 10 + 150 + 70 + 20
    seconds = run.fault_seconds if run.fault_seconds is not None else fault_seconds
    return 40 + 10 + 30 + seconds + off_seconds + 20


def pods_done(pods: list[dict[str, Any]], want: int) -> bool:
    """A scheduler's work is done: `want` pods, each bound."""
    return len(pods) >= want and all(p["spec"].get("nodeName") for p in pods)


def replica_set_done(rs: dict[str, Any], want: int) -> bool:
    """kube-controller-manager's work is done: the ReplicaSet's status shows `want` ready replicas."""
    status = rs.get("status") or {}
    return int(status.get("readyReplicas") or 0) >= want


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def table(results: list[dict[str, Any]]) -> str:
    """Markdown tables of the runs: one for the WatchList runs, one for the twoViews runs."""
    wl = ["| run | pods WatchList / LIST at start | pods WatchList / LIST / watch after the reset | watch edits "
          "| work done after the reset | fault on |", "|---|---|---|---|---|---|"]
    tv = ["| run | views pinned, in order | lagging reads (writes hidden, most) | binds ok / failed "
          "| most pods of one batch | batches done after (s) | check exit |", "|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            (wl if r["kind"] == "watchList" else tv).append(f"| {r['run']} | error: {r['error'][:120]} |")
            continue
        start, after = r["atStart"]["relist"], r["stats"]["relist"]
        j = r["journal"]
        if r["kind"] == "watchList":
            edits = ", ".join(f"{k} {v}" for k, v in j["watchEdits"].items()) or "none"
            wl.append(f"| {r['run']} | {start['watchListPods']} / {start['listPods']} "
                      f"| {after['watchListPods']} / {after['listPods']} / {after['watchPods']} | {edits} "
                      f"| {_cell(r['work'][0]['doneAfterResetSeconds'])} | {r['faultOnSeconds']} s |")
        else:
            pins = " ".join(f"{p['view']}" for p in j["viewPins"]) or "none"
            hidden = [s["writesSince"] for s in j["staleReads"] if isinstance(s.get("writesSince"), int)]
            binds = r["stats"]["bindsTotal"]
            done = " / ".join(_cell(w["doneAfterSeconds"]) for w in r["work"])
            most = max(w["maxPodsSeen"] for w in r["work"])
            tv.append(f"| {r['run']} | {pins} | {len(j['staleReads'])} ({max(hidden, default=0)}) "
                      f"| {binds['succeeded']} / {binds['failed']} | {most} | {done} "
                      f"| {_cell(r.get('check', {}).get('exit'))} |")
    return "\n".join(wl) + "\n\n" + "\n".join(tv) + "\n"


# -- the cluster --------------------------------------------------------------------------------------------------

def log(message: str) -> None:
    print(f"{dt.datetime.now(dt.UTC):%H:%M:%S} {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def cluster_lock(path: Path, wait: float) -> Iterator[None]:
    """The shared cluster lock, taken within `wait` seconds (TimeoutError otherwise)."""
    with open(path, "a") as f:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{path} not free within {wait:.0f}s") from None
                time.sleep(1.0)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def kfp(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(KFP), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def wait_until(what: str, check: Callable[[], bool], timeout: float, interval: float = 0.5) -> float | None:
    """Poll `check` until it holds (seconds it took) or `timeout` passes (None)."""
    start = time.monotonic()
    while True:
        if check():
            return time.monotonic() - start
        if time.monotonic() - start >= timeout:
            log(f"  not within {timeout:.0f}s: {what}")
            return None
        time.sleep(interval)


class Api:
    """The admin's view of the cluster, straight to the apiserver (never through the proxy)."""

    def __init__(self, kubeconfig: Path) -> None:
        from kubernetes import client as k8s
        from kubernetes import config as k8s_config

        api = k8s_config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        self.core, self.apps, self.k8s = k8s.CoreV1Api(api), k8s.AppsV1Api(api), api

    def namespace(self, name: str) -> None:
        namespace: Any = {"metadata": {"name": name}}
        self.core.create_namespace(namespace, _request_timeout=10)
        done = wait_until(f"namespace {name}'s default ServiceAccount", lambda: any(
            sa.metadata is not None and sa.metadata.name == "default"
            for sa in self.core.list_namespaced_service_account(name, _request_timeout=10).items), 30, 0.1)
        if done is None:
            raise TimeoutError(f"namespace {name} got no default ServiceAccount")

    def pod(self, namespace: str, name: str, scheduler: str) -> None:
        pod: Any = {
            "metadata": {"name": name, "labels": {"kfp-wlv": name}},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}
        self.core.create_namespaced_pod(namespace, pod, _request_timeout=10)

    def replica_set(self, namespace: str, name: str, replicas: int) -> None:
        labels = {"kfp-wlv-rs": name}
        rs: Any = {
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"terminationGracePeriodSeconds": 0,
                                           "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                                           "resources": {"requests": {"cpu": "100m",
                                                                                      "memory": "64Mi"}}}]}}}}
        self.apps.create_namespaced_replica_set(namespace, rs, _request_timeout=10)

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        answer = self.core.list_namespaced_pod(namespace, label_selector=selector, _request_timeout=10)
        return [self.k8s.sanitize_for_serialization(p) for p in answer.items]

    def rs(self, namespace: str, name: str) -> dict[str, Any]:
        answer = self.apps.read_namespaced_replica_set(name, namespace, _request_timeout=10)
        return dict(self.k8s.sanitize_for_serialization(answer))


def rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 2)


@dataclass
class Work:
    """One batch of work: what was made and when it was done (seconds from `start`, monotonic)."""

    label: str
    start: float
    done_after: float | None = None
    created_after: float | None = None  # kube-controller-manager: when its 3 pods existed
    max_pods: int = 0  # kube-controller-manager: the most pods of the ReplicaSet seen at once
    final: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "doneAfterSeconds": rounded(self.done_after),
                "podsCreatedAfterSeconds": rounded(self.created_after), "maxPodsSeen": self.max_pods, **self.final}


class Driver:
    """Makes work for the run's target and polls it."""

    def __init__(self, api: Api, target: str) -> None:
        self.api, self.target = api, target
        self.scheduler = SCHEDULER_NAMES[target]

    def trigger(self, namespace: str, name: str) -> None:
        """Something the target writes in `namespace` at once: a pod to bind, or a ReplicaSet of 1 to fill."""
        if self.target == "kube-controller-manager":
            self.api.replica_set(namespace, name, 1)
        else:
            self.api.pod(namespace, name, self.scheduler)

    def start(self, label: str) -> Work:
        work = Work(label, time.monotonic())
        if self.target == "kube-controller-manager":
            self.api.replica_set(WORK_NS, label, 3)
        else:
            for i in range(3):
                self.api.pod(WORK_NS, f"{label}-{i}", self.scheduler)
        return work

    def _pods(self, work: Work) -> list[dict[str, Any]]:
        if self.target == "kube-controller-manager":
            return self.api.pods(WORK_NS, f"kfp-wlv-rs={work.label}")
        return [p for i in range(3) for p in self.api.pods(WORK_NS, f"kfp-wlv={work.label}-{i}")]

    def poll(self, work: Work) -> bool:
        """Whether the work is done now; notes when (and, for a ReplicaSet, its pods)."""
        pods = self._pods(work)
        now = time.monotonic() - work.start
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        work.max_pods = max(work.max_pods, len(live))
        if self.target == "kube-controller-manager":
            if work.created_after is None and len(live) >= 3:
                work.created_after = now
            done = replica_set_done(self.api.rs(WORK_NS, work.label), 3)
        else:
            done = pods_done(pods, 3)
        if done and work.done_after is None:
            work.done_after = now
        return done

    def finish(self, work: Work) -> None:
        """The work's end state, for the record."""
        pods = self._pods(work)
        work.final = {"pods": len(pods), "bound": sum(1 for p in pods if p["spec"].get("nodeName")),
                      "nodes": sorted(str(p["spec"].get("nodeName")) for p in pods)}
        if self.target == "kube-controller-manager":
            status = self.api.rs(WORK_NS, work.label).get("status") or {}
            work.final["replicaSetStatus"] = {k: status.get(k) for k in ("replicas", "readyReplicas",
                                                                         "availableReplicas")}

    def wait(self, work: Work, timeout: float, also: tuple[Work, ...] = ()) -> bool:
        """Poll `work` until done (and `also`, the earlier batches, for their pod counts)."""
        def check() -> bool:
            for other in also:
                self.poll(other)
            return self.poll(work)
        return wait_until(f"{work.label} done", check, timeout) is not None


def read_journal(path: Path, after: int) -> list[dict[str, Any]]:
    """The journal file's records after sequence number `after`."""
    out = []
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                if r["seq"] > after:
                    out.append(r)
    return out


def leftovers(state_dir: Path) -> list[str]:
    """Processes still running that name the state dir (pgrep -af)."""
    r = subprocess.run(["pgrep", "-af", str(state_dir)], capture_output=True, text=True, timeout=10)
    return [line for line in r.stdout.splitlines() if line.strip()]


def measure(run: Run, state_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One run on a fresh control plane (the caller holds the lock and brings it down)."""
    from kube_fault_proxy.proxy.control.client import ControlClient
    from kube_fault_proxy.rig.cluster.record import Cluster

    result: dict[str, Any] = {"run": run.name, "target": run.target, "kind": run.kind, "fault": run.fault,
                              "stateDir": str(state_dir), "started": dt.datetime.now(dt.UTC).isoformat()}
    command = up_args(run.target, state_dir, args.nodes, args.kubernetes)
    result["upCommand"] = "kube-fault-proxy " + " ".join(command)
    up = kfp(command, timeout=args.up_timeout)
    if up.returncode != 0:
        result["error"] = f"cluster up failed ({up.returncode}): {up.stderr[-2000:]}"
        return result
    c = Cluster(state_dir)
    result["targets"] = c.targets
    result["schedulerBuild"] = c.scheduler_build
    api = Api(c.kubeconfig("admin"))
    driver = Driver(api, run.target)
    with ControlClient(c.control_url) as control:
        for ns in (WORK_NS, T1_NS, T2_NS):
            api.namespace(ns)
        time.sleep(args.settle)
        result["atStart"] = {"requestsByResource": control.stats()["requestsByResource"]}
        result["atStart"]["relist"] = relist_counts(result["atStart"]["requestsByResource"])
        control.reset_stats()
        cursor = control.cursor()
        seed = seed_for_first_view(TWO_VIEWS_RULE, 1) if run.kind == "twoViews" else 7
        control.activate(f"wlv-{run.name}", seed=seed, rules=profile_rules(run))
        result["profile"] = {"seed": seed, "rules": profile_rules(run)}
        t_on = time.monotonic()
        if run.kind == "watchList":
            watch_list_phase(run, control, driver, cursor, result, args)
        else:
            two_views_phase(run, control, driver, cursor, result, args)
        result["faultOnSeconds"] = round(result.pop("_t_off") - t_on, 2)
        stats = control.stats()
        result["stats"] = {k: stats[k] for k in ("requestsByResource", "injectionsByFault", "events", "bindsTotal")}
        result["stats"]["relist"] = relist_counts(stats["requestsByResource"])
        logs = sorted((state_dir / "logs").glob(f"{TARGET_LOGS[run.target]}*.log"))
        result["targetLog"] = signs([line for path in logs for line in path.read_text(errors="replace").splitlines()],
                                    (WORK_NS, T1_NS, T2_NS))
        records = read_journal(c.journal, cursor)
        result["journal"] = journal_summary(records)
        result["journalFirst"] = [r for r in records if r["event"] != "inject" or r.get("fault") != "twoViews"][:60]
    if run.kind != "twoViews":
        return result
    # --scheduler-name: without it `check` judges no pod (it says "clean (pods 0 ...)")
    check = [*["check", "--kubeconfig", str(c.kubeconfig("admin")), "--scheduler-name", SCHEDULER_NAMES[run.target],
               "--quiet", "5", "--wait", "60", "--grace", "10"],
             *[a for ns in (WORK_NS, T1_NS, T2_NS) for a in ("--namespace", ns)],
             "-o", str(state_dir / "check.json")]
    if run.target == "yunikorn" and c.yunikorn_url:
        check += ["--yunikorn", c.yunikorn_url]
    checked = kfp(check, timeout=90)
    result["check"] = {"command": "kube-fault-proxy " + " ".join(check), "exit": checked.returncode,
                       "output": checked.stdout[-3000:]}
    with contextlib.suppress(OSError, ValueError):
        result["check"]["report"] = json.loads((state_dir / "check.json").read_text())
    return result


def injected(control: Any, cursor: int, rule: str) -> bool:
    """Whether the journal has an injection by `rule` after `cursor`."""
    return first_time(control.journal_after(cursor).records, "inject", rule) is not None


def watch_list_phase(run: Run, control: Any, driver: Driver, cursor: int, result: dict[str, Any],
                     args: argparse.Namespace) -> None:
    """Trigger the reset, then 3 pods (or a ReplicaSet of 3) under the WatchList fault; off after the work is done
    or the fault's time is up; then polled --off-seconds more if not done."""
    fault_seconds = run.fault_seconds if run.fault_seconds is not None else args.fault_seconds
    driver.trigger(T1_NS, "trigger")
    reset = wait_until("the reset", lambda: injected(control, cursor, "reset-at-trigger"), 30, 0.1)
    result["resetSeenAfterSeconds"] = reset
    t_reset = time.monotonic()
    work = driver.start("work")
    result["workCreatedAfterResetSeconds"] = round(work.start - t_reset, 2)
    done = driver.wait(work, fault_seconds)
    if done:
        time.sleep(2)  # the relist's requests, counted before the switch-off
    control.deactivate()
    result["_t_off"] = time.monotonic()
    if not done:
        done = driver.wait(work, args.off_seconds)
    driver.finish(work)
    w = work.as_dict()
    w["doneAfterResetSeconds"] = None if work.done_after is None else round(work.start + work.done_after - t_reset, 2)
    result["work"] = [w]
    result["done"] = done


def two_views_phase(run: Run, control: Any, driver: Driver, cursor: int, result: dict[str, Any],
                    args: argparse.Namespace) -> None:
    """Batch a on the old connection; reset 1 right after (the relist on the lagging view), batch b; reset 2
    right after (back on the current view), batch c; then a few quiet seconds and the switch-off."""
    works: list[Work] = []
    resets: dict[str, float | None] = {}
    for label, trigger_ns, rule in (("a", T1_NS, "reset-1"), ("b", T2_NS, "reset-2"), ("c", None, None)):
        work = driver.start(label)
        driver.wait(work, 60, tuple(works))
        works.append(work)
        if trigger_ns is None or rule is None:
            continue
        driver.trigger(trigger_ns, f"trigger-{rule}")
        resets[rule] = wait_until(rule, functools.partial(injected, control, cursor, rule), 30, 0.1)
        for _ in range(4):  # the relist on the new connection, and what the target does after it
            for earlier in works:
                driver.poll(earlier)
            time.sleep(0.25)
    for _ in range(10):  # a ReplicaSet may have grown past 3 since it was done
        for work in works:
            driver.poll(work)
        time.sleep(0.5)
    control.deactivate()
    result["_t_off"] = time.monotonic()
    for work in works:
        driver.finish(work)
    result["resetsSeenAfterSeconds"] = resets
    result["work"] = [w.as_dict() for w in works]
    result["done"] = all(w.done_after is not None for w in works)


def run_one(run: Run, args: argparse.Namespace) -> dict[str, Any]:
    """Lock, measure, always bring the control plane down, check nothing is left."""
    state_dir = Path(args.state_root) / f"wlviews-{run.name}"
    if state_dir.exists():
        subprocess.run(["rm", "-rf", str(state_dir)], check=True, timeout=60)
    with cluster_lock(Path(args.lock), args.lock_wait):
        log(f"{run.name}: lock taken")
        start = time.monotonic()
        try:
            result = measure(run, state_dir, args)
        except Exception as e:  # a failed run is a result: the record says so
            result = {"run": run.name, "target": run.target, "kind": run.kind, "fault": run.fault,
                      "error": f"{type(e).__name__}: {e}"}
        finally:
            down = kfp(["cluster", "--state-dir", str(state_dir), "down"], timeout=120)
        result["down"] = {"exit": down.returncode, "leftover": leftovers(state_dir)}
        result["wallSeconds"] = round(time.monotonic() - start, 1)
    log(f"{run.name}: done={result.get('done')} error={result.get('error')} in {result['wallSeconds']}s")
    return result


def _terminated(signum: int, frame: object) -> None:
    raise SystemExit(f"signal {signum}: stopping")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="runs: " + ", ".join(RUNS))
    p.add_argument("runs", nargs="*", metavar="RUN", help="runs to do, in order (see below); none: list them")
    p.add_argument("-o", "--output", type=Path, help="write the results as JSON here (appending to its runs)")
    p.add_argument("--nodes", type=int, default=5, help="KWOK nodes (default 5)")
    p.add_argument("--kubernetes", help="the Kubernetes release (default: the rig's)")
    p.add_argument("--fault-seconds", type=float, default=60, help="WatchList runs: longest time on (default 60)")
    p.add_argument("--off-seconds", type=float, default=30, help="WatchList runs: polled this long after (30)")
    p.add_argument("--settle", type=float, default=3, help="seconds between up and the start counts (3)")
    p.add_argument("--up-timeout", type=float, default=180, help="seconds `cluster up` may take (180)")
    p.add_argument("--state-root", default="/tmp", help="state dirs go here as wlviews-RUN (default /tmp)")
    p.add_argument("--lock", default="/tmp/kfp-cluster.lock", help="the cluster lock")
    p.add_argument("--lock-wait", type=float, default=900, help="seconds to wait for the lock per run (900)")
    p.add_argument("--end-by", help="HH:MM UTC: start no run that could end after it")
    p.add_argument("--pause", type=float, default=5, help="seconds between runs, lock free (5)")
    p.add_argument("--table", type=Path, metavar="JSON", help="print the Markdown tables of a results file, run none")
    args = p.parse_args(argv)
    if args.table:
        print(table(json.loads(args.table.read_text())["runs"]), end="")
        return 0
    unknown = [r for r in args.runs if r not in RUNS]
    if unknown:
        p.error(f"unknown run(s): {', '.join(unknown)}")
    if not args.runs:
        for r in RUNS.values():
            print(f"{r.name:28} {r.target:24} {r.kind:10} {json.dumps(r.fault)}")
        return 0
    try:
        end_by = parse_end_by(args.end_by, dt.datetime.now(dt.UTC)) if args.end_by else None
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    signal.signal(signal.SIGTERM, _terminated)  # `timeout` ends the script: its `finally` still brings the cluster down
    os.nice(5)
    results: list[dict[str, Any]] = []
    if args.output and args.output.exists():
        results = json.loads(args.output.read_text())["runs"]
    for i, name in enumerate(args.runs):
        run = RUNS[name]
        budget = run_budget(run, args.fault_seconds, args.off_seconds)
        if end_by and dt.datetime.now(dt.UTC) + dt.timedelta(seconds=budget) > end_by:
            log(f"{name}: skipped, it could end after {end_by:%H:%M} UTC (budget {budget:.0f}s)")
            continue
        results.append(run_one(run, args))
        if args.output:
            args.output.write_text(json.dumps({"runs": results}, indent=1, default=str) + "\n")
        if i + 1 < len(args.runs):
            time.sleep(args.pause)
    if not args.output:
        print(json.dumps({"runs": results}, indent=1, default=str))
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
