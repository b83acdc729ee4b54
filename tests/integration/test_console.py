"""Progress under a real pseudo-terminal draws a bar; piped, it writes a plain line every few seconds."""

from __future__ import annotations

import sys

import pytest

from tests.support.terminal import in_pty, piped

pytestmark = pytest.mark.integration

# 60 updates over 6 s, as the load's and the settle's reporters make them
SNIPPET = """
import time
from kube_fault_proxy.rig.console import Progress
with Progress("pods", 60) as bar:
    for n in range(1, 61):
        bar.update(n, status="created")
        time.sleep(0.1)
print("done")
"""


def test_a_terminal_gets_a_live_bar() -> None:
    code, out = in_pty([sys.executable, "-c", SNIPPET], timeout=60)
    assert code == 0, out
    assert "━" in out and "60/60" in out and "created" in out
    assert out.count("\x1b[") > 5  # redrawn in place, not one line per update
    assert "  pods: " not in out  # no plain lines on a terminal


def test_a_pipe_gets_a_plain_line_every_few_seconds() -> None:
    run = piped([sys.executable, "-c", SNIPPET], timeout=60)
    assert run.code == 0, run.text
    progress = [(t, line) for t, line in run.lines if line.startswith("  pods: ")]
    assert len(progress) == 2, run.text  # one after 5 s, one at the end
    (t1, first), (_, last) = progress
    assert t1 >= 5.0 and 40 <= int(first.removeprefix("  pods: ").split("/")[0]) < 60
    assert last.startswith("  pods: 60/60 created (")
    assert "\x1b[" not in run.text and "\r" not in run.text
    assert run.lines[-1][1] == "done"
