"""The proxy's listen backlog: a client-go burst must queue, not have its SYNs dropped."""

from __future__ import annotations

import asyncio
import select
import socket
import time
from types import SimpleNamespace
from typing import Any

from kube_fault_proxy.proxy.mitm import listen

BURST = 250  # more than asyncio's default backlog of 100


def established(port: int, n: int) -> int:
    """Start n connects at once (nobody accepts); count those the kernel completes within 0.5 s."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            socks.append(s)
        time.sleep(0.5)  # loopback handshakes take microseconds; a dropped SYN waits 1 s to retry
        _, writable, _ = select.select([], socks, [], 0)
        return sum(1 for s in writable if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0)
    finally:
        for s in socks:
            s.close()


def burst_against(widen_to: int | None) -> int:
    async def main() -> int:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        proxyserver: Any = SimpleNamespace(servers=[SimpleNamespace(_servers=[server])])
        if widen_to is not None:
            assert listen.widen(proxyserver, widen_to) == 1
        port = server.sockets[0].getsockname()[1]
        # The loop is blocked inside this call: nothing is accepted, as in a busy proxy.
        count = established(port, BURST)
        server.close()
        return count

    return asyncio.run(main())


def test_asyncio_default_drops_a_burst_and_widened_queues_it() -> None:
    assert burst_against(None) <= 110  # asyncio listens with 100
    assert burst_against(1024) == BURST


def test_kernel_backlog_is_what_go_would_use() -> None:
    expected = int(listen.SOMAXCONN.read_text()) if listen.SOMAXCONN.exists() else 4096
    assert listen.kernel_backlog() == max(expected, 128)
