"""The proxy's listen backlog, made as deep as the apiserver's.

asyncio listens with a backlog of 100; Go's net package (kube-apiserver) uses the kernel's
`net.core.somaxconn` (4096 on most machines). A client-go burst opens hundreds of connections at
once: with 100, the kernel drops SYNs, and the clients' retransmissions (1 s, 2 s, 4 s, … up to
31 s) stretch into every timing the proxy is meant to control — an outage's connections would
still be dialing half a minute later.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path
from typing import Any

from kube_fault_proxy.proxy.mitm.patches import internals

SOMAXCONN = Path("/proc/sys/net/core/somaxconn")


def kernel_backlog() -> int:
    """What Go would use: the kernel's limit, else 4096."""
    try:
        return max(int(SOMAXCONN.read_text().strip()), 128)
    except (OSError, ValueError):
        return 4096


def widen(proxyserver: Any, backlog: int | None = None) -> int:
    """Re-listen every TCP socket of the proxy's servers with a deeper backlog; returns how many.

    listen(2) on a socket that already listens only changes its backlog: no connection is lost.
    """
    backlog = backlog or kernel_backlog()
    done = 0
    for ts in internals.listening_sockets(proxyserver):
        if ts.type != socket.SOCK_STREAM:
            continue
        dup = socket.socket(fileno=os.dup(ts.fileno()))
        with contextlib.closing(dup):
            dup.listen(backlog)
        done += 1
    return done
