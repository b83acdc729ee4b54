"""How long one dashboard tick holds the proxy's event loop, timed inside a real control plane.

A runtime takes ~1,000 Binding decisions a second (with bind-fail-30pct: ~300 injections a second,
each journaled, so every tick encodes a full 200-record journal tail) while N clients read
/v1/events/stream from another process. Prints Feed.tick()'s duration (sample, encode once, queue
to every client) and the loop's lateness on 5 ms sleeps. Run: .venv/bin/python bench/dashboard_tick.py
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kube_fault_proxy.proxy.control.app import build_app  # noqa: E402
from kube_fault_proxy.proxy.control.feed import Feed  # noqa: E402
from kube_fault_proxy.proxy.control.server import ControlServer  # noqa: E402
from kube_fault_proxy.proxy.journal import Journal  # noqa: E402
from kube_fault_proxy.proxy.profiles.library import Library, load_dir  # noqa: E402
from kube_fault_proxy.proxy.runtime import Runtime  # noqa: E402

from tests.support.builders import bind  # noqa: E402

READERS = """
import httpx, sys, threading
def read():
    with httpx.stream("GET", sys.argv[1], timeout=None) as r:
        for _ in r.iter_raw():
            pass
threads = [threading.Thread(target=read, daemon=True) for _ in range(int(sys.argv[2]))]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


async def measure(profile: str, clients: int, seconds: float = 6.0) -> str:
    rt = Runtime(Library(load_dir(ROOT / "fault_profiles")), Journal(None, time.time), time.monotonic, time.time)
    rt.activations.activate(profile)
    app = build_app(rt, {})
    feed: Feed = app.state.feed
    ticks: list[float] = []
    plain = feed.tick

    def timed() -> None:
        started = time.perf_counter()
        plain()
        ticks.append(time.perf_counter() - started)

    feed.tick = timed  # type: ignore[method-assign]
    server = ControlServer(app, "127.0.0.1", 0)
    await server.start()
    readers = subprocess.Popen([sys.executable, "-c", READERS, f"http://127.0.0.1:{server.port}/v1/events/stream",
                                str(clients)])
    loop = asyncio.get_running_loop()
    n, lags = 0, []
    while feed.subscribers < clients:  # the readers' start-up is not what is measured
        await asyncio.sleep(0.05)
    ticks.clear()
    end = loop.time() + seconds
    while loop.time() < end:
        for _ in range(5):
            ident = bind(f"p{n}")
            n += 1
            decision = rt.decide(ident)
            if decision is not None:
                rt.counters.performed(decision, ident, action="respond 500")
        before = loop.time()
        await asyncio.sleep(0.005)
        lags.append(loop.time() - before - 0.005)
    readers.kill()
    readers.wait()
    await server.stop()
    ticks.sort()
    lags.sort()
    tick = (f"tick() median {statistics.median(ticks) * 1000:.3f} ms, max {ticks[-1] * 1000:.3f} ms"
            if ticks else "no ticks (nobody listens)")
    return (f"{profile:<16} {clients:>2} clients: {len(ticks):>2} ticks, {tick}; "
            f"loop lateness p50 {lags[len(lags) // 2] * 1000:.3f} ms, p99 {lags[int(len(lags) * 0.99)] * 1000:.3f} ms")


def main() -> int:
    for profile, clients in (("pass-through", 0), ("pass-through", 3), ("bind-fail-30pct", 0),
                             ("bind-fail-30pct", 3), ("bind-fail-30pct", 10)):
        print(asyncio.run(measure(profile, clients)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
