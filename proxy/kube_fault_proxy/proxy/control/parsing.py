"""Where uploaded profiles are parsed: never on the event loop, and with `serve` not even in its
process, so a parse cannot hold the GIL the proxied traffic needs; bounded in time and memory."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import resource
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Protocol

import anyio

from kube_fault_proxy.proxy.profiles.loader import load_text
from kube_fault_proxy.proxy.profiles.problems import Problem, ProfileError
from kube_fault_proxy.proxy.profiles.profile import FaultProfile

CHILD_MEMORY = 1 << 30  # address space of the parsing process: far above a bounded parse
TIMEOUT_SECONDS = 10.0

Parsed = FaultProfile | tuple[list[Problem], int]  # a profile, or (problems, omitted): picklable


class Parser(Protocol):
    """Turns uploaded text into a profile, or raises ProfileError."""

    async def parse(self, text: str, source: str) -> FaultProfile: ...

    def close(self) -> None: ...


def parse_to_data(text: str, source: str) -> Parsed:
    """load_text with its ProfileError returned as data (an exception's pickling would lose it)."""
    try:
        return load_text(text, source)
    except ProfileError as e:
        return e.problems, e.omitted


def _unpack(parsed: Parsed) -> FaultProfile:
    if isinstance(parsed, FaultProfile):
        return parsed
    problems, omitted = parsed
    raise ProfileError(problems, omitted)


class ThreadParser:
    """Parses in a worker thread, one at a time (for in-process use: tests, embedding)."""

    def __init__(self) -> None:
        self._limiter = anyio.CapacityLimiter(1)

    async def parse(self, text: str, source: str) -> FaultProfile:
        """The profile, parsed off the event loop."""
        return _unpack(await anyio.to_thread.run_sync(parse_to_data, text, source, limiter=self._limiter))

    def close(self) -> None:
        """Nothing to release."""


def _start_child() -> None:
    """In the child: cap its memory, and end it when `serve` ends, even by kill -9."""
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY, CHILD_MEMORY))
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class ProcessParser:
    """Parses in one long-lived child process (started at the first upload), one at a time; a
    parse that overruns its time or memory is refused and its process replaced."""

    def __init__(self, timeout: float = TIMEOUT_SECONDS) -> None:
        self.timeout = timeout
        self._pool: ProcessPoolExecutor | None = None
        self._lock = asyncio.Lock()

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_start_child)
        return self._pool

    async def parse(self, text: str, source: str) -> FaultProfile:
        """The profile, parsed in the child; ProfileError for a bad one or an overrun."""
        async with self._lock:
            future = asyncio.get_running_loop().run_in_executor(self._executor(), parse_to_data, text, source)
            try:
                parsed = await asyncio.wait_for(future, self.timeout)
            except (TimeoutError, BrokenProcessPool, MemoryError) as e:
                self._discard()
                why = f"took longer than {self.timeout:g}s" if isinstance(e, TimeoutError) else "ran out of memory"
                raise ProfileError([Problem(source, None, None, "", f"refused: reading it {why}")]) from None
        return _unpack(parsed)

    def _discard(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        for process in list(getattr(pool, "_processes", {}).values()):  # a stuck child is killed
            with contextlib.suppress(Exception):
                process.kill()
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Stop the child process, if one was started."""
        self._discard()
