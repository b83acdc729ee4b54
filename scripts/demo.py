"""A two-minute walk-through of kube-fault-proxy: live-switched faults seen by a real HTTP/2 client.

Until the local real control plane lands (kube-apiserver + etcd + schedulers, see issue 3), the
proxy runs in front of the test suite's TLS + HTTP/2 stand-in apiserver.
"""

from __future__ import annotations

import sys
import tempfile
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.certs import make_pki
from tests.support.processes import start_fake_apiserver, start_proxy


def binds(client: httpx.Client, n: int) -> list[int]:
    out = []
    for _ in range(n):
        pod = f"demo-{uuid.uuid4().hex[:8]}"
        body = {"kind": "Binding", "apiVersion": "v1", "metadata": {"name": pod},
                "target": {"kind": "Node", "name": "node-1"}}
        out.append(client.post(f"/api/v1/namespaces/default/pods/{pod}/binding", json=body).status_code)
    return out


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="kfp-demo-"))
    pki = make_pki(work / "pki")
    print("==> starting a TLS + HTTP/2 stand-in apiserver and `kube-fault-proxy serve` in front of it")
    up = start_fake_apiserver(pki, work / "up")
    proxy = start_proxy(f"https://127.0.0.1:{up.ready['port']}", pki, work / "proxy")
    rows: list[tuple[str, str, str]] = []
    try:
        print(proxy.log.read_text())
        with (httpx.Client(http2=True, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"]) as c,
              httpx.Client(base_url=proxy.ready["controlUrl"]) as control):
            for profile, seed in [(None, None), ("bind-fail-30pct", 7), ("bind-fail-first-attempt", None),
                                  ("bind-commit-then-fail", None), ("apf-throttle-binds", 3)]:
                if profile is None:
                    control.delete("/v1/active")
                else:
                    control.put("/v1/active", json={"profile": profile, "seed": seed}).raise_for_status()
                codes = binds(c, 20)
                summary = ", ".join(f"{code}x{codes.count(code)}" for code in sorted(set(codes)))
                rows.append((profile or "(pass-through)", summary, "".join("." if x == 201 else "x" for x in codes)))
            control.delete("/v1/active")
            stats = control.get("/v1/stats").json()
            journal = control.get("/v1/journal", params={"since": 0}).json()["records"]
        print("==> 20 Binding POSTs per profile, switched live over the control plane (no restart)\n")
        print(f"{'profile':<26} {'HTTP status x count':<24} per request (. = 201)")
        for name, summary, dots in rows:
            print(f"{name:<26} {summary:<24} {dots}")
        print(f"\n==> stats: {stats['requests']} requests, {stats['injectionsTotal']} injected "
              f"{stats['injectionsByFault']}")
        print("==> last journal records:")
        for r in [r for r in journal if r["event"] == "inject"][-3:]:
            print(f"    seq {r['seq']} epoch {r['epoch']} {r['profile']}/{r['rule']}: {r['action']} "
                  f"-> {r['request']['namespace']}/{r['request']['name']}")
    finally:
        proxy.stop()
        up.stop()
    print(f"\n(journal file: {work / 'proxy' / 'journal.jsonl'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
