"""SIGINT and SIGTERM during a search: the first ends the trial in progress (raises Interrupted in the main
thread) so the search tears down and writes its report; a second one, or any during the teardown, kills every
process group the search started at once (SIGKILL) and lets the teardown finish without waiting."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(BaseException):
    """A signal ended the search (a BaseException: no `except Exception` of a trial swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        """`SIGINT` or `SIGTERM`."""
        return signal.Signals(self.signum).name


class SignalGuard:
    """Owns SIGINT and SIGTERM for a block; `kill_now` SIGKILLs what the search started (it must only signal)."""

    def __init__(self, kill_now: Callable[[], None], note: Callable[[str], None]) -> None:
        self.kill_now, self.note = kill_now, note
        self.received: list[str] = []  # every signal seen, in order
        self.tearing_down = False
        self._saved: dict[signal.Signals, Any] = {}

    @property
    def interrupted(self) -> str | None:
        """The first signal received, if any."""
        return self.received[0] if self.received else None

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.received.append(signal.Signals(signum).name)
        if len(self.received) == 1 and not self.tearing_down:
            self.note(f"{self.received[0]}: ending the trial in progress, stopping every process the search "
                      "started and writing the report (send it again to stop at once)")
            self.tearing_down = True
            raise Interrupted(signum)
        self.note(f"{signal.Signals(signum).name} again: killing every process the search started now")
        self.kill_now()

    @contextlib.contextmanager
    def installed(self) -> Iterator[SignalGuard]:
        """The handlers for the block (only in the main thread; elsewhere the defaults stay), restored after."""
        with contextlib.suppress(ValueError):  # not the main thread: signals are not ours to take
            for sig in SIGNALS:
                self._saved[sig] = signal.signal(sig, self._handle)
        try:
            yield self
        finally:
            for sig, old in self._saved.items():
                signal.signal(sig, old)
            self._saved.clear()

    @contextlib.contextmanager
    def teardown(self) -> Iterator[None]:
        """A block no first signal may break (stopping processes, writing the report): a signal kills at once."""
        before, self.tearing_down = self.tearing_down, True
        try:
            yield
        finally:
            self.tearing_down = before
