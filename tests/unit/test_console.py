"""Progress and tables: plain lines at most every few seconds off a terminal, rich bars and tables on one."""

from __future__ import annotations

import io

import pytest
from kube_fault_proxy.rig.console import Progress, show_table
from rich.console import Console


class FakeClock:
    """Time that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def plain() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=False, force_interactive=False), out


@pytest.mark.parametrize(("updates", "expected"), [
    # (seconds since start, completed) for each update -> the lines written (the last one by the exit)
    ([(0.1, 1), (1, 50), (4.9, 400)], ["  pods: 400/1000 sent (5s)"]),
    ([(5, 500), (6, 600), (9.9, 990), (10, 1000)],
     ["  pods: 500/1000 sent (5s)", "  pods: 1000/1000 sent (10s)"]),  # the exit's line would repeat it
    ([(t / 10, t) for t in range(1, 301)],  # 300 updates in 30 s (the demo's settle today: one each)
     [f"  pods: {n}/1000 sent ({n // 10}s)" for n in range(50, 301, 50)]),
    ([], ["  pods: 0/1000 (0s)"]),  # no update at all: still one line at the end
])
def test_off_a_terminal_a_line_at_most_every_interval_and_one_at_the_end(
    updates: list[tuple[float, int]], expected: list[str]
) -> None:
    console, out = plain()
    clock = FakeClock()
    start = clock.now
    with Progress("pods", 1000, console=console, clock=clock, interval=5.0) as bar:
        for t, n in updates:
            clock.now = start + t
            bar.update(n, status="sent")
    assert out.getvalue().splitlines() == expected
    assert "\r" not in out.getvalue()


def test_a_plain_line_without_total_shows_the_count() -> None:
    console, out = plain()
    clock = FakeClock()
    with Progress("go build", console=console, clock=clock) as bar:
        clock.now += 15
        bar.update(12, status="packages")
    assert out.getvalue().splitlines() == ["  go build: 12 packages (15s)"]


def test_disabled_progress_writes_nothing() -> None:
    console, out = plain()
    clock = FakeClock()
    with Progress("pods", 10, console=console, clock=clock, enabled=False) as bar:
        clock.now += 60
        bar.update(10)
        bar.note("a step")
    assert out.getvalue() == ""


def test_on_a_terminal_a_bar_is_drawn() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, force_interactive=True, width=100)
    with Progress("pods", 10, console=console) as bar:
        for n in range(1, 11):
            bar.update(n, status="created")
    text = out.getvalue()
    assert "━" in text and "10/10" in text and "pods" in text and "\x1b[" in text


def test_notes_are_lines_of_their_own() -> None:
    console, out = plain()
    with Progress("pods", 10, console=console, clock=FakeClock()) as bar:
        bar.note("  [  2.0s] activate x")
    assert out.getvalue().splitlines() == ["  [  2.0s] activate x", "  pods: 0/10 (0s)"]


ROWS = [("stranded", "NO", 3, "a/p1, a/p2")]


def test_a_table_off_a_terminal_is_the_plain_text() -> None:
    out = io.StringIO()
    show_table(("invariant", "holds", "violations", "examples"), ROWS, "the plain text", file=out)
    assert out.getvalue() == "the plain text\n"


def test_a_table_on_a_terminal_is_drawn_by_rich(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TTY_INTERACTIVE", "1")
    show_table(("invariant", "holds", "violations", "examples"), ROWS, "the plain text", file=out,
               caption="3 violations")
    text = out.getvalue()
    assert "the plain text" not in text
    assert "stranded" in text and "a/p1, a/p2" in text and "3 violations" in text and "━" in text
