"""What the proxy's memory does over a long soak: RSS against requests served, and what grows.

h2load (4 connections, 16 streams each, Binding-like POSTs, as bench/fidelity's soak) runs N requests
through `kube-fault-proxy serve` (the 3-rule bench profile active) to the benchmarks' own nginx. Every
`--every` seconds: requests the proxy counted (/v1/stats) and its RSS. With --trace the proxy runs under
bench/memtrace (tracemalloc, --trace frames) and dumps a snapshot and gc type counts at each of
--dumps evenly spaced request counts; --package runs another checkout's package (PYTHONPATH);
--env sets the proxy's environment (MALLOC_ARENA_MAX=2, ...). Results: JSON to --out.

  bench/memory_soak.py --requests 300000 [--trace 10 --dumps 4] [--package /work/other/proxy]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from bench_proxy import BODY, PATH, PROFILE, rss_mb  # noqa: E402

from bench.nginx import private_nginx  # noqa: E402
from tests.support.certs import make_pki  # noqa: E402
from tests.support.processes import start_proxy  # noqa: E402


def _wait_dump(directory: Path, n: int, timeout: float = 120) -> dict[str, Any]:
    path = directory / f"dump-{n}.json"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size:
            return dict(json.loads(path.read_text()))
        time.sleep(0.2)
    raise TimeoutError(f"no {path} after {timeout}s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=300_000)
    ap.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--trace", type=int, default=0, help="tracemalloc frames (0: no tracing)")
    ap.add_argument("--dumps", type=int, default=0, help="dumps at evenly spaced request counts (and one at 0)")
    ap.add_argument("--package", type=Path, help="the kube_fault_proxy package root to run (PYTHONPATH)")
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE for the proxy's environment")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="kfp-memsoak-"))
    dumps = work / "dumps"
    dumps.mkdir()
    pki = make_pki(work / "pki")
    (work / "body.json").write_text(BODY)
    env = dict(e.split("=", 1) for e in args.env)
    pythonpath = [str(p) for p in (args.package,) if p]
    if args.dumps:
        pythonpath.insert(0, str(ROOT / "bench" / "memtrace"))
        env |= {"KFP_MEMTRACE_DIR": str(dumps), "KFP_MEMTRACE_FRAMES": str(args.trace)}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(pythonpath)
    profiles = work / "profiles"
    profiles.mkdir()
    (profiles / "bench-miss.yaml").write_text(PROFILE)
    samples: list[dict[str, float]] = []
    taken: list[dict[str, Any]] = []
    with private_nginx(pki) as nginx:
        kfp = start_proxy(nginx.url, pki, work / "kfp", "--profiles", str(profiles), "--profile", "bench-miss",
                          env=env)
        try:
            pid, control = kfp.proc.pid, kfp.ready["controlUrl"]
            marks = [args.requests * i // args.dumps for i in range(args.dumps + 1)] if args.dumps else []

            def requests() -> int:
                return int(httpx.get(f"{control}/v1/stats", timeout=30).json()["requests"])

            def dump(at: int) -> None:
                os.kill(pid, signal.SIGUSR2)
                d = _wait_dump(dumps, len(taken) + 1)
                taken.append({"requests": at, **d})
                print(f"  dump {d['n']} at {at:,} requests: rss {d.get('rssMb')} MB, traced {d.get('tracedMb')} MB, "
                      f"gc objects {d.get('gcObjects')}{' ' + d['error'] if 'error' in d else ''}", flush=True)

            if marks:
                dump(0)
                marks.pop(0)
            t0 = time.monotonic()
            h2 = subprocess.Popen(["h2load", "-n", str(args.requests), "-c", "4", "-m", "16", "-d",
                                   str(work / "body.json"), "-H", "content-type: application/json",
                                   kfp.ready["proxyUrl"] + PATH], stdout=subprocess.PIPE, text=True)
            deadline = t0 + max(600, args.requests / 100)
            while h2.poll() is None and time.monotonic() < deadline:
                time.sleep(args.every)
                n = requests()
                samples.append({"t": round(time.monotonic() - t0, 1), "requests": n, "rssMb": round(rss_mb(pid), 1)})
                while marks and n >= marks[0]:
                    dump(marks.pop(0))
            if h2.poll() is None:
                h2.kill()
            out = h2.communicate()[0]
            for at in marks:  # the last mark (all requests) if the poll loop ended before it
                dump(max(at, requests()))
            rps = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
            ok = re.search(r"status codes: (\d+) 2xx", out)
            end = {"requests": requests(), "rssMb": round(rss_mb(pid), 1)}
        finally:
            kfp.stop()
    warm = next((s for s in samples if s["t"] >= 60), samples[0] if samples else end)
    result = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "requests": args.requests,
              "ok": int(ok.group(1)) if ok else 0, "rps": float(rps.group(1)) if rps else None,
              "package": str(args.package or ROOT / "proxy"), "env": env, "trace": args.trace,
              "rssAfterWarmupMb": warm["rssMb"], "warmupAtRequests": warm["requests"], "rssEndMb": end["rssMb"],
              "rssMaxMb": max([s["rssMb"] for s in samples] + [end["rssMb"]]),
              "load": os.getloadavg(), "samples": samples, "dumps": taken, "dumpDir": str(dumps)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("samples", "dumps")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
