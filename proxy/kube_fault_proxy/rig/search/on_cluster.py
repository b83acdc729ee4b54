"""The coordinator's side of a campaign on a cluster, through kubectl: create the Job, follow its pods (each index's
attempts, their nodes and phases) and read their logs as trials land, until the Job ends or its deadline passes."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from kube_fault_proxy.rig.cluster import build
from kube_fault_proxy.rig.search import worker_log
from kube_fault_proxy.rig.search.job_manifest import (
    CAMPAIGN_LABEL,
    INDEX_ANNOTATION,
    JOB_NAME_LABEL,
    Campaign,
    deadline,
    job,
    labels_of,
    worker_rbac,
)
from kube_fault_proxy.rig.search.outcome import Settings
from kube_fault_proxy.rig.search.worker_log import Attempt

POLL_SECONDS = 5.0
LOG_TIMEOUT = 60.0
MAP_LIMIT = 900_000  # characters of records an index's ConfigMap holds (the apiserver takes up to 1 MiB)


class CampaignError(RuntimeError):
    """kubectl failed, or the Job could not be made."""


class Kubectl:
    """kubectl against the cluster the user named (the rig's build when there is one, else the one on PATH)."""

    def __init__(self, kubeconfig: Path | None) -> None:
        rig = build.kubernetes("kubectl").binary
        found = str(rig) if rig.is_file() else shutil.which("kubectl")
        if found is None:
            raise CampaignError("no kubectl: `kube-fault-proxy cluster build` builds one, or put one on PATH")
        self.argv = [found, *(["--kubeconfig", str(kubeconfig)] if kubeconfig else [])]

    def run(self, *args: str, stdin: str | None = None, timeout: float = LOG_TIMEOUT) -> str:
        """kubectl's output; CampaignError with its stderr when it fails."""
        r = subprocess.run([*self.argv, *args], input=stdin, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            raise CampaignError(f"kubectl {' '.join(args)}: {r.stderr.strip()[-2000:]}")
        return r.stdout

    def json(self, *args: str) -> dict[str, Any]:
        """kubectl ... -o json, parsed."""
        doc: dict[str, Any] = json.loads(self.run(*args, "-o", "json"))
        return doc


def attempt_of(pod: dict[str, Any], log: worker_log.WorkerLog) -> Attempt:
    """A Job pod as an attempt at its index."""
    meta, status = pod["metadata"], pod.get("status", {})
    terminated = next((s.get("state", {}).get("terminated") for s in status.get("containerStatuses") or []
                       if s.get("state", {}).get("terminated")), None)
    reasons = []
    disruption = next((c for c in status.get("conditions") or []
                       if c.get("type") == "DisruptionTarget" and c.get("status") == "True"), None)
    if disruption is not None:  # evicted (the Eviction API, a drain), preempted, or its node tainted away
        reasons.append(f"disrupted: {disruption.get('reason') or 'DisruptionTarget'}")
    if terminated is not None and terminated.get("exitCode"):
        reasons.append(f"{terminated.get('reason', 'Error')}, exit {terminated['exitCode']}")
    elif status.get("reason"):
        reasons.append(str(status["reason"]))
    reason = "; ".join(reasons) or None
    return Attempt(index=int(meta["annotations"][INDEX_ANNOTATION]), pod=meta["name"],
                   node=pod["spec"].get("nodeName"), phase=str(status.get("phase", "Pending")), log=log,
                   started=status.get("startTime"), finished=(terminated or {}).get("finishedAt"), reason=reason)


def job_state(doc: dict[str, Any]) -> str | None:
    """Complete or Failed once the Job has ended (and the reason it failed), else None."""
    for c in doc.get("status", {}).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return str(c["type"]) + (f" ({c.get('reason')}: {c.get('message')})" if c["type"] == "Failed" else "")
    return None


@dataclass
class JobRun:
    """What the Job did: every attempt seen (a deleted pod keeps what was last read of it), how it ended."""

    attempts: list[Attempt] = field(default_factory=list)
    seconds: float = 0.0
    ended: str = "deadline"  # Complete, Failed (…), deadline (the coordinator stopped waiting), stopped (interrupted)


class JobFollower:
    """Follows one Job's pods and logs."""

    def __init__(self, kubectl: Kubectl, campaign: Campaign, note: Callable[[str], None]) -> None:
        self.k, self.c, self.note = kubectl, campaign, note
        self.seen: dict[str, Attempt] = {}
        self._said = ""
        self.kept: dict[int, int] = {}  # per index, the records its ConfigMap holds
        self.lock = threading.Lock()  # seen: polled in one thread, read by the coordinator in another
        self.uid: str | None = None  # the Job's
        self.attached = False

    def keep_records(self) -> None:
        """Per index, the records of its attempt that got furthest, into the index's ConfigMap: a retried worker
        (the Job's next pod for that index) resumes from them instead of starting its search over."""
        for index, a in worker_log.chosen(self.attempts()).items():
            lines: list[str] = []
            size, kept = 0, 0
            for seq, record in enumerate(a.log.records):
                more = worker_log.record_lines(seq, record)
                size += sum(len(x) + 1 for x in more)
                if size > MAP_LIMIT:  # a prefix is still a search to resume; the rest is run again
                    break
                lines += more
                kept += 1
            if kept <= self.kept.get(index, 0):
                continue
            meta: dict[str, Any] = {"name": self.c.records_map(index), "namespace": self.c.namespace,
                                    "labels": labels_of(self.c)}
            if self.uid:  # deleting the Job deletes its records too
                meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": self.c.name,
                                            "uid": self.uid}]
            doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                   "data": {"records": "\n".join(lines) + "\n", "pod": a.pod}}
            with contextlib.suppress(CampaignError):  # kept at the next poll
                self.k.run("apply", "--server-side", "--force-conflicts", "--field-manager=kube-fault-proxy",
                           "-f", "-", stdin=json.dumps(doc))
                self.kept[index] = kept

    def start(self, s: Settings, wall: Callable[[], float] = time.time) -> float:
        """Make the workers' ServiceAccount and Role, then create the Job, or attach to the Job of that name if an
        earlier run of the same campaign made it (CampaignError if that Job was made for other settings). The
        Job's age in seconds (0 when created now)."""
        wanted = job(s, self.c)
        rbac = worker_rbac(self.c)
        if rbac:
            self.k.run("apply", "--server-side", "--force-conflicts", "--field-manager=kube-fault-proxy", "-f", "-",
                       stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": rbac}))
        found = self.k.run("-n", self.c.namespace, "get", "job", self.c.name, "--ignore-not-found", "-o", "json")
        if found.strip():
            existing = json.loads(found)
            differs = [what for what, path in (("worker command", ("containers", 0, "args")),
                                               ("image", ("containers", 0, "image")))
                       if _at(existing["spec"]["template"]["spec"], path) != _at(wanted["spec"]["template"]["spec"],
                                                                                 path)]
            differs += [f"spec.{k}" for k in ("completions", "parallelism", "backoffLimitPerIndex")
                        if existing["spec"].get(k) != wanted["spec"][k]]
            if differs:
                raise CampaignError(
                    f"job {self.c.namespace}/{self.c.name} exists and was made for another campaign "
                    f"({', '.join(differs)} differ): delete it (kubectl -n {self.c.namespace} delete job "
                    f"{self.c.name}) or pass another --job-name")
            self.uid, self.attached = existing["metadata"].get("uid"), True
            created = datetime.fromisoformat(existing["metadata"]["creationTimestamp"]).timestamp()
            age = max(0.0, wall() - created)
            self.note(f"attached to job {self.c.namespace}/{self.c.name}, made {age:.0f} s ago by an earlier run of "
                      "this campaign: following it, not making another")
            return age
        made = json.loads(self.k.run("create", "-f", "-", "-o", "json", stdin=json.dumps(wanted)))
        self.uid = made.get("metadata", {}).get("uid")
        self.note(f"created job {self.c.namespace}/{self.c.name}: {self.c.workers} workers, "
                  f"{s.budget:.0f} s each; deadline {deadline(s, self.c)} s")
        return 0.0

    def poll(self) -> None:
        """Read the Job's pods now, and the log of every pod whose container has started."""
        pods = self.k.json("-n", self.c.namespace, "get", "pods", "-l", f"{JOB_NAME_LABEL}={self.c.name}")
        listed = set()
        for pod in pods.get("items", []):
            name = pod["metadata"]["name"]
            listed.add(name)
            log = self.seen[name].log if name in self.seen else worker_log.WorkerLog()
            statuses = pod.get("status", {}).get("containerStatuses") or []
            if any("running" in s.get("state", {}) or "terminated" in s.get("state", {}) for s in statuses):
                with contextlib.suppress(CampaignError):  # the pod went since the listing: keep what was read
                    log = worker_log.longer(log, worker_log.parse(
                        self.k.run("-n", self.c.namespace, "logs", name, "-c", "worker")))
            with self.lock:
                self.seen[name] = attempt_of(pod, log)
        with self.lock:
            for name, a in list(self.seen.items()):
                if name not in listed and a.phase in ("Pending", "Running"):  # deleted (or evicted and removed)
                    self.seen[name] = replace(a, phase="Gone")  # before the coordinator saw it end
        self.keep_records()
        said = "; ".join(f"{a.index}: {a.pod} {a.phase} on {a.node or '-'}, {len(a.log.records)} trials"
                         for a in self.attempts())
        if said != self._said:
            self.note(f"job {self.c.name}: {said}")
            self._said = said

    def follow(self, s: Settings, clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep, wall: Callable[[], float] = time.time) -> JobRun:
        """Create the Job (or attach to it) and follow it until it ends (or its deadline and two minutes more have
        passed, counted from the Job's creation)."""
        return self.watch(s, clock() - self.start(s, wall), clock, sleep)

    def watch(self, s: Settings, t0: float, clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep, stop: threading.Event | None = None) -> JobRun:
        """Follow the Job made at `t0` (on `clock`) until it ends, its deadline and two minutes more have passed,
        or `stop` is set (the coordinator was interrupted: the Job runs on)."""
        run = JobRun()
        while clock() - t0 < deadline(s, self.c) + 120:
            self.poll()
            ended = job_state(self.k.json("-n", self.c.namespace, "get", "job", self.c.name))
            if ended is not None:
                run.ended = ended
                break
            if stop is not None and stop.wait(POLL_SECONDS):
                run.ended = "stopped"
                break
            if stop is None:
                sleep(POLL_SECONDS)
        if run.ended != "stopped":
            self.poll()  # the last lines of every pod
        run.seconds = clock() - t0
        run.attempts = self.attempts()
        self.note(f"job {self.c.name}: {run.ended} after {run.seconds:.0f} s")
        return run

    def attempts(self) -> list[Attempt]:
        """Every attempt seen so far (safe to call while another thread polls)."""
        with self.lock:
            return sorted(self.seen.values(), key=lambda a: (a.index, a.pod))

    def delete(self) -> None:
        """Delete the Job and its pods, the records kept for its indexes, and the workers' ServiceAccount and Role
        (if the campaign made them)."""
        self.k.run("-n", self.c.namespace, "delete", "job", self.c.name, "--cascade=background", "--wait=false")
        self.k.run("-n", self.c.namespace, "delete", "configmaps,rolebindings,roles,serviceaccounts", "-l",
                   f"{CAMPAIGN_LABEL}={self.c.name}", "--wait=false")


def _at(doc: Any, path: tuple[str | int, ...]) -> Any:
    """doc[path[0]][path[1]]…, None where it is missing."""
    for key in path:
        try:
            doc = doc[key]
        except (KeyError, IndexError, TypeError):
            return None
    return doc
