"""Proxied vs direct, in the same run: Binding-like POSTs over HTTP/2 + TLS.

Upstream: nginx (TLS, h2) answering every POST with a 201 Status. Load: h2load. Three paths,
alternated round by round so a noisy machine hurts each the same:
  direct      h2load -> nginx
  kfp         h2load -> kube-fault-proxy serve (a 3-rule profile active, none injecting) -> nginx
  mitmdump    h2load -> plain `mitmdump -q` reverse proxy, no addon -> nginx  (the reference)
Throughput: -c4 -m16. Latency: one request at a time (-c1 -m1), percentiles from h2load's log.
With --dashboard-clients N a fourth path joins the rotation:
  kfp+dashboard  the same kfp process, while N clients read its dashboard feed (/v1/events/stream)
nginx is the benchmark's own (bench/nginx.py: private config, port and files; stopped by its pid), never
a system one. Needs: h2load (Debian nghttp2-client) and an nginx binary; `bench/run` provides both.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack, nullcontext
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.nginx import nginx_binary, private_nginx  # noqa: E402
from tests.support.certs import make_pki  # noqa: E402
from tests.support.processes import Started, start_proxy  # noqa: E402

BODY = json.dumps({"kind": "Binding", "apiVersion": "v1", "metadata": {"name": "p1", "namespace": "default"},
                   "target": {"kind": "Node", "name": "node-1"}})
PATH = "/api/v1/namespaces/default/pods/p1/binding"
PROFILE = """apiVersion: kube-fault-proxy/v1
kind: FaultProfile
metadata: {name: bench-miss, description: "Three rules that match but never inject."}
spec:
  rules:
    - name: other-node
      match: {verbs: [create], resources: [pods], subresources: [binding], targetNodes: [no-such-node]}
      fault: {abort: {status: 500}}
    - name: lists
      match: {verbs: [list], resources: [pods, nodes]}
      fault: {throttle: {}}
    - name: never
      match: {verbs: [create], resources: [pods], subresources: [binding]}
      probability: 0.0
      fault: {abort: {status: 503}}
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 20) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port}")


def h2load(url: str, n: int, c: int, m: int, work: Path) -> dict[str, float]:
    body = work / "body.json"
    body.write_text(BODY)
    log = work / "h2load.log"
    log.unlink(missing_ok=True)
    out = subprocess.run(["h2load", "-n", str(n), "-c", str(c), "-m", str(m), "-d", str(body),
                          "-H", "content-type: application/json", "--log-file", str(log), url + PATH],
                         capture_output=True, text=True, timeout=max(600, n / 100))  # a soak of 1 M: ~17 min
    rps = float(re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out.stdout).group(1))  # type: ignore[union-attr]
    ok = re.search(r"status codes: (\d+) 2xx", out.stdout)
    lat = sorted(int(line.split()[2]) for line in log.read_text().splitlines() if line.strip())
    return {"rps": rps, "ok": int(ok.group(1)) if ok else 0,
            "p50_ms": lat[len(lat) // 2] / 1000, "p99_ms": lat[int(len(lat) * 0.99) - 1] / 1000}


class DashboardClients:
    """N readers of the dashboard's live feed, as N open browser tabs would be; counts the ticks they get."""

    def __init__(self, control_url: str, n: int) -> None:
        self._url = f"{control_url}/v1/events/stream"
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._read, daemon=True) for _ in range(n)]
        self.ticks = 0
        self.seconds = 0.0
        self._started = 0.0

    def _read(self) -> None:
        with httpx.stream("GET", self._url, timeout=httpx.Timeout(10, read=None)) as r:
            r.raise_for_status()
            for chunk in r.iter_raw():
                self.ticks += chunk.count(b"event: tick")
                if self._stop.is_set():
                    return

    def __enter__(self) -> DashboardClients:
        self._started = time.monotonic()
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)
        self.seconds += time.monotonic() - self._started


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=4000, help="per throughput run through a proxy")
    ap.add_argument("--sequential", type=int, default=600, help="requests per latency run")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "latest.json")
    ap.add_argument("--dashboard-clients", type=int, default=0, metavar="N",
                    help="add a kfp+dashboard path: the kfp rounds again, with N dashboard feeds open")
    args = ap.parse_args()
    for tool, found in (("h2load", shutil.which("h2load")), ("nginx", nginx_binary())):
        if found is None:
            print(f"bench needs {tool}: run bench/run (it installs nghttp2-client and unpacks nginx)", file=sys.stderr)
            return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a `kill` ends it through the finally below
    work = Path(tempfile.mkdtemp(prefix="kfp-bench-"))
    pki = make_pki(work / "pki")
    (work / "client-combined.pem").write_bytes((pki / "client.key").read_bytes() + (pki / "client.pem").read_bytes())
    procs: list[subprocess.Popen[bytes]] = []
    kfp: Started | None = None
    nginx = ExitStack()
    try:
        upstream = nginx.enter_context(private_nginx(pki)).url
        profiles = work / "profiles"
        profiles.mkdir()
        (profiles / "bench-miss.yaml").write_text(PROFILE)
        kfp = start_proxy(upstream, pki, work / "kfp", "--profiles", str(profiles), "--profile", "bench-miss")
        mitm_port = free_port()
        mitmdump = Path(sys.executable).with_name("mitmdump")
        procs.append(subprocess.Popen([
            str(mitmdump), "-q", "--mode", f"reverse:{upstream}@127.0.0.1:{mitm_port}",
            "--set", f"confdir={work / 'mitm'}",
            "--set", f"ssl_verify_upstream_trusted_ca={pki / 'ca.pem'}",
            "--set", f"client_certs={work / 'client-combined.pem'}",
        ]))
        wait_port(mitm_port)
        paths = {"direct": upstream, "kfp": kfp.ready["proxyUrl"], "mitmdump": f"https://127.0.0.1:{mitm_port}"}
        if args.dashboard_clients:
            paths["kfp+dashboard"] = kfp.ready["proxyUrl"]
        dashboard = DashboardClients(kfp.ready["controlUrl"], args.dashboard_clients)
        results: dict[str, dict[str, list[float]]] = {k: {} for k in paths}
        for r in range(args.rounds):
            for name, url in paths.items():
                n = args.requests * (5 if name == "direct" else 1)
                with DashboardClients(kfp.ready["controlUrl"], args.dashboard_clients) if name == "kfp+dashboard" \
                        else nullcontext() as clients:
                    thr = h2load(url, n, 4, 16, work)
                    seq = h2load(url, args.sequential, 1, 1, work)
                if clients is not None:
                    dashboard.ticks += clients.ticks
                    dashboard.seconds += clients.seconds
                assert thr["ok"] == n and seq["ok"] == args.sequential, (name, thr, seq)
                for key, value in (("rps", thr["rps"]), ("loaded_p50_ms", thr["p50_ms"]),
                                   ("p50_ms", seq["p50_ms"]), ("p99_ms", seq["p99_ms"])):
                    results[name].setdefault(key, []).append(value)
                print(f"round {r + 1}/{args.rounds} {name:<13} {thr['rps']:>9.0f} req/s   "
                      f"sequential p50 {seq['p50_ms']:.3f} ms  p99 {seq['p99_ms']:.3f} ms", flush=True)
        median = {name: {k: statistics.median(v) for k, v in res.items()} for name, res in results.items()}
        median["kfp"]["rss_mb"] = rss_mb(kfp.proc.pid)
        median["mitmdump"]["rss_mb"] = rss_mb(procs[0].pid)
        with_kfp = median["kfp"]
        summary = {
            "kfp_vs_mitmdump_throughput": with_kfp["rps"] / median["mitmdump"]["rps"],
            "kfp_vs_direct_throughput": with_kfp["rps"] / median["direct"]["rps"],
            "kfp_added_p50_ms": with_kfp["p50_ms"] - median["direct"]["p50_ms"],
            "kfp_added_p99_ms": with_kfp["p99_ms"] - median["direct"]["p99_ms"],
        }
        if args.dashboard_clients:
            with_ui = median["kfp+dashboard"]
            summary.update({
                "dashboard_clients": args.dashboard_clients,
                "dashboard_ticks_per_client_per_s": dashboard.ticks / dashboard.seconds / args.dashboard_clients,
                "dashboard_vs_kfp_throughput": with_ui["rps"] / with_kfp["rps"],
                "dashboard_added_p50_ms": with_ui["p50_ms"] - with_kfp["p50_ms"],
                "dashboard_added_p99_ms": with_ui["p99_ms"] - with_kfp["p99_ms"],
            })
        doc = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": os.cpu_count(),
               "rounds": args.rounds, "median": median, "summary": summary}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
        print("\npath          req/s (c4 m16)  p50 ms (1 at a time)  p99 ms   RSS MB")
        for name in paths:
            m = median[name]
            print(f"{name:<13} {m['rps']:>10.0f}  {m['p50_ms']:>20.3f}  {m['p99_ms']:>7.3f}  "
                  f"{m.get('rss_mb', 0):>7.0f}")
        print(f"\nkfp / mitmdump throughput: {summary['kfp_vs_mitmdump_throughput']:.2f}x;  "
              f"kfp / direct: {summary['kfp_vs_direct_throughput']:.3f}x;  "
              f"added p50 {summary['kfp_added_p50_ms']:.2f} ms, p99 {summary['kfp_added_p99_ms']:.2f} ms")
        if args.dashboard_clients:
            print(f"with {args.dashboard_clients} dashboard feed(s) open "
                  f"({summary['dashboard_ticks_per_client_per_s']:.1f} updates/s each): "
                  f"{summary['dashboard_vs_kfp_throughput']:.3f}x kfp's throughput, "
                  f"p50 {summary['dashboard_added_p50_ms']:+.3f} ms, p99 {summary['dashboard_added_p99_ms']:+.3f} ms")
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
