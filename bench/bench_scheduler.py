"""Scheduler benchmark: real YuniKorn and kube-scheduler, direct vs through kube-fault-proxy, one run.

Every arm gets a fresh local control plane (etcd, kube-apiserver, fake nodes, the scheduler), and
the arms alternate round by round (the order rotates), so a noisy 2-core machine hurts each alike.
Arms:
  direct          the scheduler talks to the apiserver
  pass-through    through the proxy, no profile active
  profile         through the proxy, a 3-rule profile active whose rules match but never inject
  direct-100      direct, the apiserver at its default of 100 streams per connection
  proxy-100       through the proxy (4096 streams to the scheduler), apiserver at 100
  direct-pinned   direct, everything (etcd, apiserver, KWOK, the scheduler, the load and its watch) on one core
  proxy-pinned    through the proxy, no profile: the proxy alone on a core of its own, everything else on the
                  other, as in direct-pinned
The two pinned arms split what the proxy costs a scheduler on this machine: proxy-pinned against
direct-pinned is the latency the proxy adds (its CPU no longer competes with the apiserver's and the
scheduler's: they have the same one core either way); pass-through against direct is that plus the
CPU the proxy takes from them on the shared cores. Pinning is by sched_setaffinity on every thread of
each process once the control plane is up (threads made later inherit it), and on this process.
Unless named -100, the apiserver runs with --http2-max-streams-per-connection equal to the
proxy's advertised limit (4096), so direct and proxied dial alike.

Measured per run, from a direct watch on the pods (the same observer in every arm): time from the
first pod created to the last bound, the 200th bound, Bindings per second, and — from the kernel's
TCP counters and the proxy's own — the connections the scheduler dialed during the wave; the
proxy's CPU seconds and RSS from /proc. Results: bench/results/scheduler-*.json; `--markdown`
prints the records' table (docs/records/performance-scheduler.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kube_fault_proxy.kube.kubeapi import HTTPError, Kube, Pod  # noqa: E402
from kube_fault_proxy.rig.cluster.control_plane import Options, down, up  # noqa: E402
from kube_fault_proxy.rig.cluster.record import Cluster  # noqa: E402
from kube_fault_proxy.rig.workloads import load  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
import profile_breakdown  # noqa: E402

PROFILE = """apiVersion: kube-fault-proxy/v1
kind: FaultProfile
metadata: {name: bench-miss, description: "Three rules that match but never inject."}
spec:
  rules:
    - name: other-node
      match: {verbs: [create], resources: [pods], subresources: [binding], targetNodes: [no-such-node]}
      fault: {abort: {status: 500}}
    - name: lists
      match: {verbs: [list], resources: [pods, nodes], names: [no-such-object]}
      fault: {throttle: {}}
    - name: never
      match: {verbs: [create], resources: [pods], subresources: [binding]}
      probability: 0.0
      fault: {abort: {status: 503}}
"""
SCHEDULER_NAMES = {"kube-scheduler": "default-scheduler", "yunikorn": "yunikorn"}
ARMS = {  # name: (through the proxy, profile, apiserver streams, pinned)
    "direct": (False, None, 4096, False),
    "pass-through": (True, None, 4096, False),
    "profile": (True, "bench-miss", 4096, False),
    "direct-100": (False, None, 0, False),
    "proxy-100": (True, None, 0, False),
    "direct-pinned": (False, None, 4096, True),
    "proxy-pinned": (True, None, 4096, True),
}


def core_layout(available: set[int]) -> tuple[set[int], set[int]]:
    """(the proxy's cores, everything else's) for the pinned arms: the highest core for the proxy, the rest
    for the others; at least two cores are needed."""
    if len(available) < 2:
        raise SystemExit(f"the pinned arms need two cores; this process may use {sorted(available)}")
    proxy = {max(available)}
    return proxy, available - proxy


def pin(pid: int, cpus: set[int]) -> int:
    """Pin every thread of a process to these cores (sched_setaffinity per thread); how many threads."""
    tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except ProcessLookupError:
            continue  # a thread that ended meanwhile
    return len(tids)


def pin_cluster(c: Cluster, proxy_cores: set[int], other_cores: set[int]) -> dict[str, list[int]]:
    """The pinned layout: the proxy on its cores, every other component of the cluster and this process on
    the others. Returns each process's cores, for the record."""
    layout: dict[str, list[int]] = {}
    for name, proc in c.processes.items():
        cores = proxy_cores if name == "kube-fault-proxy" else other_cores
        pin(proc.pid, cores)
        layout[name] = sorted(cores)
    pin(os.getpid(), other_cores)  # the load and the watch run here
    layout["bench (load, watch)"] = sorted(other_cores)
    return layout


def tcp_active_opens() -> int:
    """The kernel's count of TCP connects made on this machine (all processes)."""
    lines = Path("/proc/net/snmp").read_text().splitlines()
    names, values = (line.split() for line in lines if line.startswith("Tcp:"))
    return int(values[names.index("ActiveOpens")])


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    """Resident memory of a process."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class BindWatch(threading.Thread):
    """A direct watch on the load's pods: when each one got its node."""

    def __init__(self, kube: Kube, namespace: str, run_id: str) -> None:
        super().__init__(daemon=True)
        self.kube, self.namespace, self.run_id = kube, namespace, run_id
        self.bound: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        labels = {load.LOAD_LABEL: self.run_id}
        with self.kube.client() as client:  # this thread's own connection
            while not self.stop.is_set():  # list, then watch; again after any error (the list catches up)
                try:
                    listing = client.list(Pod, namespace=self.namespace, labels=labels)
                    for pod in listing:
                        self._seen(pod)
                    events = client.watch(Pod, namespace=self.namespace, labels=labels, server_timeout=600,
                                          resource_version=listing.resourceVersion)
                    self.ready.set()
                    for _kind, pod in events:
                        if self.stop.is_set():
                            return
                        self._seen(pod)
                except (HTTPError, ValueError, KeyError) as e:
                    self.errors.append(f"{type(e).__name__}: {e}")
                    time.sleep(0.2)

    def _seen(self, obj: dict[str, Any]) -> None:
        name = obj.get("metadata", {}).get("name")
        if name and obj.get("spec", {}).get("nodeName") and name not in self.bound:
            self.bound[name] = time.monotonic()
        if name and obj.get("status", {}).get("phase") == "Running" and name not in self.running:
            self.running[name] = time.monotonic()


@dataclass
class Run:
    """One arm, one round."""

    scheduler: str
    arm: str
    pods: int
    round: int
    figures: dict[str, Any] = field(default_factory=dict)


class ProxySampler:
    """py-spy recording the proxy for one wave (`--sample-proxy`): raw collapsed stacks, 250 Hz,
    without pausing the proxy per sample (--nonblocking), stopped with SIGINT, which makes it write."""

    def __init__(self, pid: int, output: Path) -> None:
        self.output = output
        py_spy = Path(sys.executable).with_name("py-spy")
        self.proc = subprocess.Popen([str(py_spy), "record", "--pid", str(pid), "--rate", "250", "--format", "raw",
                                      "--nonblocking", "--output", str(output)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)  # attached
        if self.proc.poll() is not None:
            raise RuntimeError(f"py-spy exited: {self.proc.stderr.read().decode() if self.proc.stderr else ''}")

    def stop(self) -> dict[str, Any]:
        """Stop sampling; the breakdown of what was sampled."""
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        return {"sample": str(self.output), **profile_breakdown.read(self.output.read_text().splitlines()).as_dict()}


def run_arm(scheduler: str, arm: str, pods: int, rate: float, nodes: int, state_dir: Path,
            profiles_dir: Path, timeout: float, sample_dir: Path | None = None) -> dict[str, Any]:
    """Bring up a fresh control plane for this arm, create the pods, time the binding wave; then
    wait until every pod runs (KWOK's status updates reach the scheduler through the proxy too)."""
    proxied, profile, streams, pinned = ARMS[arm]
    own_cores = os.sched_getaffinity(0)
    c: Cluster = up(Options(state_dir=state_dir, nodes=nodes, scheduler=scheduler, proxy=proxied, profile=profile,
                            profiles_dir=profiles_dir, apiserver_max_streams=streams))
    api = c.admin_api()
    control = httpx.Client(base_url=c.control_url, timeout=10) if proxied else None
    layout = pin_cluster(c, *core_layout(own_cores)) if pinned else None
    try:
        time.sleep(3)  # the scheduler's informers have synced and its connections are idle
        # HTTP/2: the load's creations share one connection, so the machine's connect count is the scheduler's
        spec = load.LoadSpec(count=pods, rate=rate, concurrency=16, namespace="default",
                             scheduler_name=SCHEDULER_NAMES[scheduler], timeout=timeout, http2=True)
        watch = BindWatch(api, spec.namespace, spec.run_id)
        watch.start()
        watch.ready.wait(10)
        proxy_pid = c.processes["kube-fault-proxy"].pid if proxied else None
        sched_pid = c.processes[scheduler].pid
        stats0 = control.get("/v1/stats").json() if control else None
        conns0 = stats0["connections"] if stats0 else None
        sampler = (ProxySampler(proxy_pid, sample_dir / f"{scheduler}-{pods}-{arm}-{time.strftime('%H%M%S')}.txt")
                   if sample_dir is not None and proxy_pid else None)
        cpu0 = cpu_seconds(proxy_pid) if proxy_pid else 0.0
        sched_cpu0 = cpu_seconds(sched_pid)
        opens0 = tcp_active_opens()
        t0 = time.monotonic()
        loaded = load.create_pods(api, spec, progress=False)
        created_at = t0  # the first pod is created at once
        deadline = time.monotonic() + timeout
        while len(watch.bound) < loaded.created and time.monotonic() < deadline:
            time.sleep(0.1)
        t_end = time.monotonic()
        opens = tcp_active_opens() - opens0
        cpu_bound = cpu_seconds(proxy_pid) if proxy_pid else 0.0
        while len(watch.running) < loaded.created and time.monotonic() < deadline:
            time.sleep(0.1)
        t_running = time.monotonic()
        cpu_running = cpu_seconds(proxy_pid) if proxy_pid else 0.0
        profile_figures = sampler.stop() if sampler else None
        watch.stop.set()
        times = sorted(t - created_at for t in watch.bound.values())
        figures: dict[str, Any] = {
            "created": loaded.created, "createSeconds": round(loaded.seconds, 2),
            "createRate": round(loaded.rate, 1), "bound": len(times),
            "allBoundSeconds": round(times[-1], 2) if len(times) == loaded.created else None,
            "firstBoundSeconds": round(times[0], 2) if times else None,
            "bind200Seconds": round(times[199], 2) if len(times) >= 200 else None,
            "bindsPerSecond": round((len(times) - 1) / (times[-1] - times[0]), 1) if len(times) > 1 else None,
            "tcpConnectsOnMachine": opens,
            "schedulerCpuSeconds": round(cpu_seconds(sched_pid) - sched_cpu0, 2),
            "waveSeconds": round(t_end - t0, 2), "watchErrors": watch.errors[:5],
        }
        figures.update(allRunningSeconds=round(t_running - t0, 2) if len(watch.running) == loaded.created else None)
        if layout is not None:
            figures["cores"] = layout
        if control is not None and proxy_pid is not None and conns0 is not None and stats0 is not None:
            stats = control.get("/v1/stats").json()
            conns = stats["connections"]
            accepted = conns["clientAccepted"] - conns0["clientAccepted"]
            upstream = conns["upstreamOpened"] - conns0["upstreamOpened"]
            requests = stats["requests"] - stats0["requests"]
            cpu_all = cpu_running - cpu0
            # CPU to the last bind (as README's earlier figures), and over the whole wave until every pod
            # runs (its Running status events included), per pod and per request the proxy decided.
            figures.update(schedulerDials=accepted, proxyUpstreamDials=upstream,
                           proxyCpuSeconds=round(cpu_bound - cpu0, 2),
                           proxyCpuSecondsAllRunning=round(cpu_all, 2),
                           proxyCpuMsPerPod=round(1000 * cpu_all / max(1, loaded.created), 2),
                           proxyRequests=requests,
                           proxyCpuMsPerRequest=round(1000 * cpu_all / requests, 3) if requests else None,
                           proxyRssMb=round(rss_mb(proxy_pid), 1))
            if profile_figures is not None:
                figures["proxyProfile"] = profile_figures
        else:
            # Direct: every connect on the machine in the wave but the load's own one is the scheduler's.
            figures.update(schedulerDials=max(0, opens - 1))
        return figures
    finally:
        if control is not None:
            control.close()
        down(c.dir)
        pin(os.getpid(), own_cores)


def summarize(runs: list[Run]) -> dict[str, Any]:
    """Medians per scheduler, size and arm, and the proxied/direct ratios of the all-bound time."""
    out: dict[str, Any] = {}
    keys = sorted({(r.scheduler, r.pods, r.arm) for r in runs})
    for s, n, a in keys:
        mine = [r.figures for r in runs if (r.scheduler, r.pods, r.arm) == (s, n, a)]
        med: dict[str, Any] = {"rounds": len(mine)}
        for k in mine[0]:
            vals = [f[k] for f in mine if isinstance(f.get(k), int | float)]
            med[k] = round(statistics.median(vals), 2) if vals else None
        out.setdefault(s, {}).setdefault(str(n), {})[a] = med
    for sizes in out.values():
        for arms in sizes.values():
            base = arms.get("direct", {}).get("allBoundSeconds")
            for med in arms.values():
                t = med.get("allBoundSeconds")
                # >1: faster than direct (direct time / this arm's time)
                med["speedVsDirect"] = round(base / t, 3) if base and t else None
    return out


def markdown(summary: dict[str, Any]) -> str:
    """The records' table (docs/records/performance-scheduler.md)."""
    rows = ["| scheduler | pods | arm | all bound s | 200th bound s | binds/s | scheduler dials | "
            "proxy CPU s | proxy CPU ms/pod (all running) | proxy CPU ms/request | proxy RSS MB | speed vs direct |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s, sizes in summary.items():
        for n, arms in sizes.items():
            for a, m in arms.items():
                def f(k: str, m: dict[str, Any] = m) -> str:
                    v = m.get(k)
                    return "-" if v is None else f"{v:g}"
                rows.append(f"| {s} | {n} | {a} | {f('allBoundSeconds')} | {f('bind200Seconds')} | "
                            f"{f('bindsPerSecond')} | {f('schedulerDials')} | {f('proxyCpuSeconds')} | "
                            f"{f('proxyCpuMsPerPod')} | {f('proxyCpuMsPerRequest')} | "
                            f"{f('proxyRssMb')} | {f('speedVsDirect')} |")
    return "\n".join(rows)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--schedulers", default="yunikorn,kube-scheduler")
    p.add_argument("--pods", default="1000,3000", help="sizes, comma-separated")
    p.add_argument("--arms", default="direct,pass-through,profile,direct-100,proxy-100")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rate", type=float, default=2000, help="pods created per second (asked; achieved is reported)")
    p.add_argument("--nodes", type=int, default=50)
    p.add_argument("--timeout", type=float, default=300, help="bound on one arm's wave")
    p.add_argument("-o", "--output", type=Path, default=None)
    p.add_argument("--sample-proxy", type=Path, default=None, metavar="DIR",
                   help="record each proxied arm's proxy with py-spy (250 Hz) into DIR and add the breakdown "
                        "by library and mitmproxy layer to its figures (bench/profile_breakdown.py)")
    p.add_argument("--markdown", type=Path, default=None, help="print the table of a results file and exit")
    args = p.parse_args()
    if args.markdown:
        print(markdown(json.loads(args.markdown.read_text())["summary"]))
        return 0
    schedulers = args.schedulers.split(",")
    sizes = [int(n) for n in args.pods.split(",")]
    arms = args.arms.split(",")
    unknown = [a for a in arms if a not in ARMS] + [s for s in schedulers if s not in SCHEDULER_NAMES]
    if unknown:
        p.error(f"unknown: {', '.join(unknown)}")
    work = Path(tempfile.mkdtemp(prefix="kfp-bench-sched-"))
    profiles = work / "profiles"
    profiles.mkdir()
    if args.sample_proxy:
        args.sample_proxy.mkdir(parents=True, exist_ok=True)
    (profiles / "bench-miss.yaml").write_text(PROFILE)
    output = args.output or ROOT / "bench" / "results" / f"scheduler-{time.strftime('%Y%m%d-%H%M%S')}.json"
    runs: list[Run] = []
    started = time.time()
    total = args.rounds * len(schedulers) * len(sizes) * len(arms)
    for rnd in range(args.rounds):
        for s in schedulers:
            for n in sizes:
                order = arms[rnd % len(arms):] + arms[:rnd % len(arms)]  # rotate: no arm always first
                for a in order:
                    run = Run(s, a, n, rnd)
                    print(f"[{len(runs) + 1}/{total}] round {rnd + 1} {s} {n} pods {a} …", file=sys.stderr,
                          flush=True)
                    run.figures = run_arm(s, a, n, args.rate, args.nodes, work / "cluster", profiles, args.timeout,
                                          args.sample_proxy)
                    print(f"    {json.dumps(run.figures)}", file=sys.stderr, flush=True)
                    runs.append(run)
                    output.parent.mkdir(parents=True, exist_ok=True)
                    output.write_text(json.dumps({
                        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                        "machine": {"cpus": os.cpu_count(), "uname": " ".join(os.uname())},
                        "settings": vars(args) | {"output": str(output), "markdown": None,
                                                  "sample_proxy": str(args.sample_proxy or "") or None},
                        "runs": [r.__dict__ for r in runs], "summary": summarize(runs)}, indent=1))
    print(markdown(summarize(runs)))
    print(f"results: {output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
