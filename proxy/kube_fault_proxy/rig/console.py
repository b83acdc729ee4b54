"""The terminal: rich progress bars and tables on a TTY; in a log or CI, a plain line every few seconds."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TextIO

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.progress import Progress as Bars
from rich.table import Table

PLAIN_INTERVAL = 5.0  # seconds between two plain progress lines (non-TTY)


def stderr_console() -> Console:
    """A console on stderr (progress and notes go there; results go to stdout)."""
    return Console(stderr=True, highlight=False)


def interactive(console: Console) -> bool:
    """True on a real terminal (not a pipe, a file, or TERM=dumb), where bars and live updates belong."""
    return console.is_interactive


class Progress:
    """One long task's progress: a live bar on a terminal; elsewhere at most one plain line every
    `interval` seconds, and one when it ends."""

    def __init__(self, description: str, total: float | None = None, *, console: Console | None = None,
                 enabled: bool = True, interval: float = PLAIN_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.description, self.total, self.enabled = description, total, enabled
        self.console = console or stderr_console()
        self.interval, self.clock = interval, clock
        self.completed: float = 0
        self.status = ""
        self.lines = 0  # plain lines written (non-TTY)
        self._written = ""
        self._bars: Bars | None = None
        self._task: TaskID | None = None
        self._started = self._last_line = clock()

    def __enter__(self) -> Progress:
        self._started = self._last_line = self.clock()
        if self.enabled and interactive(self.console):
            self._bars = Bars(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                              TextColumn("{task.fields[status]}"), TimeElapsedColumn(), console=self.console,
                              redirect_stdout=False, refresh_per_second=4)
            self._bars.start()
            self._task = self._bars.add_task(self.description, total=self.total, status="")
        return self

    def update(self, completed: float, total: float | None = None, status: str = "") -> None:
        """Where the task is now; cheap to call often (a plain line is written only every `interval`)."""
        self.completed, self.status = completed, status
        if total is not None:
            self.total = total
        if not self.enabled:
            return
        if self._bars is not None and self._task is not None:
            self._bars.update(self._task, completed=completed, total=self.total, status=status)
        elif self.clock() - self._last_line >= self.interval:
            self._line()

    def note(self, message: str) -> None:
        """A line of its own (above the bar on a terminal), e.g. a scenario step."""
        if self.enabled:
            self.console.print(message, markup=False, highlight=False, soft_wrap=True)

    def _line(self, final: bool = False) -> None:
        done = f"{self.completed:g}" + (f"/{self.total:g}" if self.total is not None else "")
        status = f" {self.status}" if self.status else ""
        text = f"  {self.description}: {done}{status} ({self.clock() - self._started:.0f}s)"
        if final and text == self._written:
            return  # the last line already said it
        print(text, file=self.console.file, flush=True)
        self.lines += 1
        self._written, self._last_line = text, self.clock()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._bars is not None:
            self._bars.stop()
            self._bars = None
        elif self.enabled:
            self._line(final=True)


def show_table(headers: Sequence[str], rows: Sequence[Sequence[object]], plain: str, *,
               file: TextIO | None = None, title: str | None = None, caption: str | None = None) -> None:
    """A table: drawn by rich on a terminal; elsewhere `plain`, the text scripts and logs already read."""
    out = file or sys.stdout
    console = Console(file=out, highlight=False)
    if not interactive(console):
        print(plain, file=out, flush=True)
        return
    table = Table(*headers, title=title, caption=caption, box=box.SIMPLE_HEAVY, title_justify="left",
                  caption_justify="left")
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    console.print(table)
