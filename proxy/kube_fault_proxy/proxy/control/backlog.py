"""How far behind a client's stream is, measured from its transport: the bytes written to it that its TCP
has not acknowledged (asyncio's buffer and the kernel's send queue), and how long since that was nothing."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import struct
import termios
from collections.abc import Callable

DRAIN_SECONDS = 5.0  # a stream that has not drained for this long is dropped


def unsent_bytes(transport: asyncio.WriteTransport) -> int:
    """What the client has not taken yet: the transport's buffer plus the socket's send queue (Linux SIOCOUTQ)."""
    total = transport.get_write_buffer_size()
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError, ValueError):
            total += struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]
    return total


class DrainWatch:
    """A stream keeps up while its backlog falls to nothing at least once every `seconds`; no timers."""

    def __init__(self, clock: Callable[[], float], seconds: float = DRAIN_SECONDS) -> None:
        self.seconds = seconds
        self._clock = clock
        self.drained_at = clock()
        self.unsent = 0

    def observe(self, unsent: int) -> None:
        """The backlog now; nothing left counts as drained."""
        self.unsent = unsent
        if unsent == 0:
            self.drained_at = self._clock()

    def remaining(self) -> float:
        """Seconds until the stream counts as behind (a write may block this long, no more)."""
        return self.seconds - (self._clock() - self.drained_at)

    def behind(self) -> bool:
        """Whether it has not drained within the bound."""
        return self.remaining() <= 0
