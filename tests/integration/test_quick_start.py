"""The quick start's stand-in variant, followed as it is written: Sybil reads the page, every block marked `run`
is run with bash in a fresh home directory, and every output the page shows is compared with what was printed.

The page's commands use the default ports (the stand-in on 6443, the proxy on 7443, its control plane on 7080),
exactly as a reader runs them; a busy port fails the test with the stand-in's or serve's own message."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sybil import Example

from tests.support.doc_pages import PAGES, ROOT, Block, blocks, mismatches, output_after, parse

PAGE = ROOT / "docs/getting-started/quick-start.md"
BIN = Path(sys.executable).parent  # the venv's kube-fault-proxy


class PageRunner:
    """A Sybil evaluator: runs the page's `run` blocks in order, in one directory, with one home."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.page = blocks(PAGE)
        self.background: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.printed: dict[str, str] = {}  # a background command's first words -> what it printed
        self.ran = 0
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("KFP_")}
        self.env.update(HOME=str(home), PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")

    def __call__(self, example: Example) -> None:
        block: Block = example.parsed
        if not block.is_command or block.marker is None or block.marker.directive != "run":
            return
        shown = output_after(self.page, block)
        self.ran += 1
        if block.marker.arguments == "background":
            printed = self._start(block, shown)
            self.printed[" ".join(block.source.split()[:2])] = printed
        else:
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.source], cwd=self.home, env=self.env,
                                  capture_output=True, timeout=60)
            printed = done.stdout.decode()
            assert done.returncode == 0, (f"{block.where} exited {done.returncode}:\n{printed}"
                                          f"{done.stderr.decode()}")
        if shown is not None:
            assert mismatches(shown.source, printed, str(self.home)) == [], f"{block.where}: output differs"

    def _start(self, block: Block, shown: Block | None) -> str:
        """Start a block that keeps running; wait until it has printed as many lines as the page shows."""
        log = self.home / f"background-{len(self.background)}.log"
        proc = subprocess.Popen(["bash", "-c", f"exec {block.source.strip()}"], cwd=self.home, env=self.env,
                                stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
        self.background.append((proc, log))
        want = len(shown.source.splitlines()) if shown else 1
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            printed = log.read_text(errors="replace")
            if len(printed.splitlines()) >= want and printed.endswith("\n"):
                return printed
            assert proc.poll() is None, f"{block.where} exited {proc.returncode}:\n{printed}"
            time.sleep(0.1)
        raise AssertionError(f"{block.where}: not {want} lines of output within 60 s:\n{log.read_text()}")

    def stop(self) -> list[str]:
        """Stop what the page started in the background (its process groups, newest first); their logs if one
        did not exit cleanly."""
        problems = []
        for proc, log in reversed(self.background):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, as the page says
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            if proc.returncode not in (0, -signal.SIGINT):
                problems.append(f"exit {proc.returncode}:\n{log.read_text(errors='replace')}")
        return problems


@pytest.mark.integration
def test_the_quick_start_with_the_stand_in_works_as_written(tmp_path: Path) -> None:
    runner = PageRunner(tmp_path)
    try:
        for example in parse(PAGE, runner):
            example.evaluate()
    finally:
        problems = runner.stop()
    assert runner.ran >= 6, "the stand-in variant's blocks were not run"
    assert problems == []
    banner = runner.printed["kube-fault-proxy serve"]
    shown = [b for page in PAGES for b in blocks(page)
             if b.marker and b.marker.directive == "generated" and b.marker.arguments.startswith("serve-banner")]
    assert shown, "no page shows serve's banner as generated"
    for block in shown:  # the same banner wherever a page shows it (front-of-a-cluster.md)
        assert mismatches(block.source, banner, str(tmp_path)) == [], block.where
