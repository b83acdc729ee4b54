"""How transparent the proxy is, measured in one run: bursts, watches, switches, and a long soak.

  burst    kfp-burst (client-go v0.35.5's own transport, which dials a new connection whenever every
           stream is taken) sends N concurrent Binding POSTs: direct to nginx, through
           kube-fault-proxy, and through a stock `mitmdump` (hyper-h2's 100 streams). Connections
           dialed, time to the 200th and the last answer, proxy CPU. h2load cannot show this: it keeps
           its connections fixed.
  watch    200 concurrent watches on the real kube-apiserver (client-go, in kfp-burst), half direct and
           half through the proxy; each ConfigMap write is seen by both halves: added latency per event.
  switch   requests back to back through the proxy while profiles are switched live: time from the
           PUT /v1/active being sent to the first injected answer, and requests that began after the
           switch was acknowledged but were not injected (must be 0).
  soak     N requests (default 1,000,000) through the proxy with a 3-rule profile active; RSS sampled.
Results: bench/results/fidelity.json. Needs h2load and nginx (bench/fidelity provides them; the nginx is
its own, bench/nginx.py, never a system one) and root-free loopback only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from bench_proxy import PROFILE, free_port, h2load, rss_mb, wait_port  # noqa: E402
from kube_fault_proxy.kube.kubeapi import ensure_namespace  # noqa: E402
from kube_fault_proxy.rig.cluster.build import build, burst_client  # noqa: E402
from kube_fault_proxy.rig.cluster.control_plane import Options, down, up  # noqa: E402
from lightkube.models.meta_v1 import ObjectMeta  # noqa: E402
from lightkube.resources.core_v1 import ConfigMap  # noqa: E402

from bench.nginx import nginx_binary, private_nginx  # noqa: E402
from tests.support.certs import make_pki  # noqa: E402
from tests.support.processes import Started, start_proxy  # noqa: E402

ALL_503 = """apiVersion: kube-fault-proxy/v1
kind: FaultProfile
metadata: {name: all-503, description: "Every Binding fails with 503."}
spec:
  rules:
    - name: all
      match: {verbs: [create], resources: [pods], subresources: [binding]}
      fault: {abort: {status: 503}}
"""


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], p: float) -> float:
    """The p-th percentile (nearest rank)."""
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s)) - 1))]


def kubeconfig(path: Path, server: str, ca: Path) -> Path:
    """A kubeconfig with no credentials (nginx and the stand-in upstream need none)."""
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "b",
           "clusters": [{"name": "b", "cluster": {"server": server, "certificate-authority": str(ca)}}],
           "users": [{"name": "b", "user": {}}], "contexts": [{"name": "b", "context": {"cluster": "b", "user": "b"}}]}
    path.write_text(yaml.safe_dump(doc))
    return path


def bench_burst(paths: dict[str, tuple[str, Path, int | None]], sizes: list[int], rounds: int,
                work: Path, timeout: int = 300) -> dict[str, Any]:
    """kfp-burst per path and size, alternating; medians."""
    binary = build(burst_client())
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in range(rounds):
        for n in sizes:
            names = list(paths)
            for name in names[r % len(names):] + names[:r % len(names)]:
                url, ca, pid = paths[name]
                kc = kubeconfig(work / f"burst-{name}.kubeconfig", url, ca)
                cpu0 = cpu_seconds(pid) if pid else 0.0
                out = subprocess.run([str(binary), "-kubeconfig", str(kc), "-n", str(n), "-hold", "0", "-verb", "bind",
                                      "-node", "node-1", "-qps", "5000", "-burst", "5000", "-timeout", f"{timeout}s"],
                                     capture_output=True, text=True, timeout=timeout + 100)
                if out.returncode != 0:
                    raise RuntimeError(f"kfp-burst via {name}: {out.stderr}")
                res = json.loads(out.stdout)
                res["proxyCpuSeconds"] = round(cpu_seconds(pid) - cpu0, 2) if pid else None
                runs.setdefault(f"{name} {n}", []).append(res)
                print(f"  burst round {r + 1} {name:<9} n={n}: dials {res['dialsInBurst']:>5}  "
                      f"200th {res['nthSeconds']:.2f}s  last {res['wallSeconds']:.2f}s  "
                      f"cpu {res['proxyCpuSeconds']}", flush=True)
    keys = ("dialsInBurst", "nthSeconds", "wallSeconds", "proxyCpuSeconds", "succeeded")
    return {k: {f: statistics.median(x[f] for x in v) if v[0].get(f) is not None else None for f in keys} | {
        "rounds": len(v)} for k, v in runs.items()}


def bench_switch(control: str, proxy_url: str, ca: str, switches: int) -> dict[str, Any]:
    """Back-to-back Binding POSTs on one connection while the profile is switched on and off."""
    log: list[tuple[float, float, int]] = []
    stop = threading.Event()

    def traffic() -> None:
        with httpx.Client(http2=True, verify=ca, base_url=proxy_url, timeout=10) as c:
            while not stop.is_set():
                name = f"s-{uuid.uuid4().hex[:8]}"
                t = time.monotonic()
                r = c.post(f"/api/v1/namespaces/default/pods/{name}/binding",
                           json={"kind": "Binding", "apiVersion": "v1", "metadata": {"name": name},
                                 "target": {"kind": "Node", "name": "node-1"}})
                log.append((t, time.monotonic(), r.status_code))

    worker = threading.Thread(target=traffic, daemon=True)
    worker.start()
    effects, acks, missed = [], [], 0
    with httpx.Client(base_url=control, timeout=10) as ctl:
        time.sleep(0.5)
        for _ in range(switches):
            t0 = time.monotonic()
            ctl.put("/v1/active", json={"profile": "all-503"}).raise_for_status()
            t1 = time.monotonic()
            time.sleep(0.1)
            off = time.monotonic()
            ctl.delete("/v1/active").raise_for_status()
            t2 = time.monotonic()
            time.sleep(0.1)
            window = [x for x in log if t0 <= x[0] and x[1] <= t2]
            first = next((end for start, end, code in window if code == 503), None)
            if first is not None:
                effects.append((first - t0) * 1000)
            acks.append((t1 - t0) * 1000)
            missed += sum(1 for start, end, code in window if start > t1 and end < off and code != 503)
    stop.set()
    worker.join(5)
    return {"switches": switches, "effectP50Ms": round(pct(effects, 50), 2), "effectP99Ms": round(pct(effects, 99), 2),
            "ackP50Ms": round(pct(acks, 50), 2), "ackP99Ms": round(pct(acks, 99), 2),
            "requestsAfterAckNotInjected": missed, "requestsDuring": len(log)}


def bench_soak(url: str, pid: int, n: int, work: Path) -> dict[str, Any]:
    """n requests through the proxy (h2load, 4 connections), RSS every 5 s."""
    samples: list[tuple[float, float]] = []
    stop = threading.Event()
    t0 = time.monotonic()

    def sample() -> None:
        while not stop.wait(5):
            samples.append((round(time.monotonic() - t0, 1), round(rss_mb(pid), 1)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start_rss = rss_mb(pid)
    res = h2load(url, n, 4, 16, work)
    stop.set()
    sampler.join(10)
    end_rss = rss_mb(pid)
    warm = [mb for t, mb in samples if t >= 60] or [end_rss]
    return {"requests": n, "ok": res["ok"], "rps": res["rps"], "rssStartMb": round(start_rss, 1),
            "rssAfterWarmupMb": warm[0], "rssEndMb": round(end_rss, 1),
            "rssMaxMb": max(mb for _, mb in samples or [(0, end_rss)]),
            "growthAfterWarmup": round(end_rss / warm[0] - 1, 3), "samples": samples}


def bench_watch(work: Path, watches: int, events: int) -> dict[str, Any]:
    """watches/2 direct and watches/2 through the proxy (two kfp-burst watchers, client-go), one real
    apiserver; each of `events` ConfigMap creates is seen by both: added latency per event and watch."""
    binary = build(burst_client())
    c = up(Options(state_dir=work / "cluster", nodes=1, scheduler="none", proxy=True))
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        api = c.admin_api().client()
        namespace = "bench-watch"
        ensure_namespace(api, namespace)
        for side, kc in (("direct", c.kubeconfig("admin")), ("proxy", c.kubeconfig("admin-via-proxy"))):
            procs[side] = subprocess.Popen(
                [str(binary), "-kubeconfig", str(kc), "-verb", "watch", "-n", str(watches // 2), "-events",
                 str(events), "-namespace", namespace, "-prefix", "cm-", "-timeout", "300s"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for side, p in procs.items():
            assert p.stderr is not None
            line = p.stderr.readline().strip()
            if line != "ready":
                raise RuntimeError(f"{side} watcher: {line} {p.stderr.read()}")
        time.sleep(1)
        sent: dict[str, float] = {}
        for i in range(events):
            name = f"cm-{i:04d}"
            sent[name] = time.time()
            api.create(ConfigMap(metadata=ObjectMeta(name=name, namespace=namespace), data={"i": str(i)}))
            time.sleep(0.05)
        seen = {side: json.loads(p.communicate(timeout=120)[0])["arrivals"] for side, p in procs.items()}
        api.close()
        added, lat = [], {"direct": [], "proxy": []}
        for name, t in sent.items():
            at = {side: [w[name] for w in ws if name in w] for side, ws in seen.items()}
            for side in at:
                lat[side] += [(x - t) * 1000 for x in at[side]]
            if at["direct"] and at["proxy"]:
                # the same event, the same moment of writing: what the proxy added to its delivery
                added += [(x - statistics.median(at["direct"])) * 1000 for x in at["proxy"]]
        delivered = {side: sum(len(w) for w in ws) for side, ws in seen.items()}
        return {"watches": watches, "events": events, "delivered": delivered,
                "expectedPerSide": events * (watches // 2),
                "directP50Ms": round(pct(lat["direct"], 50), 2), "directP99Ms": round(pct(lat["direct"], 99), 2),
                "proxyP50Ms": round(pct(lat["proxy"], 50), 2), "proxyP99Ms": round(pct(lat["proxy"], 99), 2),
                "addedP50Ms": round(pct(added, 50), 2), "addedP99Ms": round(pct(added, 99), 2)}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(5)
        down(c.dir)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="burst,watch,switch,soak", help="sections, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--burst-sizes", default="1000,3000")
    ap.add_argument("--burst-timeout", type=int, default=300,
                    help="seconds each burst may take (a stock mitmdump answers few of them in 300)")
    ap.add_argument("--watches", type=int, default=200)
    ap.add_argument("--events", type=int, default=100)
    ap.add_argument("--switches", type=int, default=100)
    ap.add_argument("--soak", type=int, default=1_000_000, help="requests in the soak")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fidelity.json")
    args = ap.parse_args()
    only = set(args.only.split(","))
    for tool, found in (("h2load", shutil.which("h2load")), ("nginx", nginx_binary())):
        if found is None:
            print(f"bench needs {tool}: run bench/fidelity (it installs nghttp2-client and unpacks nginx)",
                  file=sys.stderr)
            return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a `kill` ends it through the finally below
    work = Path(tempfile.mkdtemp(prefix="kfp-fidelity-"))
    pki = make_pki(work / "pki")
    (work / "client-combined.pem").write_bytes((pki / "client.key").read_bytes() + (pki / "client.pem").read_bytes())
    procs: list[subprocess.Popen[bytes]] = []
    nginx = ExitStack()
    kfp: Started | None = None
    results: dict[str, Any] = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "machine": {"cpus": os.cpu_count(), "uname": " ".join(os.uname())}}
    try:
        upstream = nginx.enter_context(private_nginx(pki)).url
        profiles = work / "profiles"
        profiles.mkdir()
        (profiles / "bench-miss.yaml").write_text(PROFILE)
        (profiles / "all-503.yaml").write_text(ALL_503)
        kfp = start_proxy(upstream, pki, work / "kfp", "--profiles", str(profiles), "--profile", "bench-miss")
        mitm_port = free_port()
        mitmdump = Path(sys.executable).with_name("mitmdump")
        procs.append(subprocess.Popen([
            str(mitmdump), "-q", "--mode", f"reverse:{upstream}@127.0.0.1:{mitm_port}",
            "--set", f"confdir={work / 'mitm'}", "--set", f"ssl_verify_upstream_trusted_ca={pki / 'ca.pem'}",
            "--set", f"client_certs={work / 'client-combined.pem'}"]))
        wait_port(mitm_port)
        if "burst" in only:
            paths = {"direct": (upstream, pki / "ca.pem", None),
                     "kfp": (kfp.ready["proxyUrl"], Path(kfp.ready["caFile"]), kfp.proc.pid),
                     "mitmdump": (f"https://127.0.0.1:{mitm_port}", work / "mitm" / "mitmproxy-ca-cert.pem",
                                  procs[-1].pid)}
            results["burst"] = bench_burst(paths, [int(n) for n in args.burst_sizes.split(",")], args.rounds, work,
                                           args.burst_timeout)
        if "switch" in only:
            results["switch"] = bench_switch(kfp.ready["controlUrl"], kfp.ready["proxyUrl"], kfp.ready["caFile"],
                                             args.switches)
            httpx.put(f"{kfp.ready['controlUrl']}/v1/active", json={"profile": "bench-miss"}).raise_for_status()
            print(f"  switch: {json.dumps(results['switch'])}", flush=True)
        if "watch" in only:
            results["watch"] = bench_watch(work, args.watches, args.events)
            print(f"  watch: {json.dumps(results['watch'])}", flush=True)
        if "soak" in only and args.soak:
            results["soak"] = bench_soak(kfp.ready["proxyUrl"], kfp.proc.pid, args.soak, work)
            print(f"  soak: {json.dumps({k: v for k, v in results['soak'].items() if k != 'samples'})}", flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        print(f"(written to {args.out})")
    finally:
        try:
            if kfp is not None:
                kfp.stop()
            for p in procs:
                p.terminate()
                p.wait(10)
        finally:
            nginx.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
