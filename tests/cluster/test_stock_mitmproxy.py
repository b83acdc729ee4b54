"""A scheduler wave through a stock mitmproxy: the cluster's proxy started with every library change of
proxy/mitm/patches skipped (KFP_STOCK_MITMPROXY=1, as `serve --stock-mitmproxy`), the held-back wave tests run
in a pytest of their own against it."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.support.processes import ROOT


def test_the_wave_tests_pass_through_a_stock_mitmproxy() -> None:
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-s",
                           "tests/cluster/test_wave.py"],
                          cwd=ROOT, env={**os.environ, "KFP_STOCK_MITMPROXY": "1"}, capture_output=True, text=True,
                          timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-5000:]
    assert re.search(r"^2 passed", done.stdout.strip().splitlines()[-1]), out[-3000:]
    assert "gates: 200 lifted" in out and "scheduler: ready" in out  # both waves ran, one bound per pod
    assert re.search(r"library changes applied: 0 of (\d+)", out), out[-3000:]  # the cluster's proxy ran stock
