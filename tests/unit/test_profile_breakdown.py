"""bench/profile_breakdown.py: a py-spy raw sample read into leaf and inclusive shares — and a real
py-spy recording of a real mitmproxy message build, so a py-spy upgrade that changes its format fails here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import profile_breakdown as pb  # noqa: E402

SAMPLE = """\
<module> (x.py:1);run (asyncio/base_events.py:1987);_run (asyncio/events.py:88);hook_task (mitmproxy/proxy/server.py:357);create_task (mitmproxy/utils/asyncio_utils.py:28) 3
<module> (x.py:1);Handle._run (asyncio/events.py:84);server_event (kube_fault_proxy/proxy/mitm/patches/inline_hooks.py:120);handle_event (mitmproxy/proxy/layers/http/__init__.py:120);MessageData.__post_init__ (mitmproxy/http.py:194);check_option_type (mitmproxy/utils/typecheck.py:30) 2
<module> (kube_fault_proxy/cli/serve.py:1);Handle._run (asyncio/events.py:84);request (kube_fault_proxy/proxy/mitm/addon.py:90);decide (kube_fault_proxy/proxy/engine.py:50) 4
<module> (kube_fault_proxy/cli/serve.py:1);Handle._run (asyncio/events.py:84);data_received (h2/connection.py:1500);decode (hpack/hpack.py:400) 1
"""


def test_leaf_shares_add_up_and_inclusive_rows_count_each_stack_they_are_on() -> None:
    b = pb.read(SAMPLE.splitlines())
    assert b.total == 10
    assert b.leaf == {pb.LEAF_ROWS[0][0]: 1, "mitmproxy other": 3, "mitmproxy type checks (utils/typecheck)": 2,
                      "kube-fault-proxy (addon, engine, counters, journal, control)": 4}
    shares = b.shares()
    assert sum(shares["leaf"].values()) == pytest.approx(100.0)
    inc = shares["inclusive"]
    assert inc["a task per hook: ConnectionHandler.hook_task"] == 30.0
    assert inc["type checks on messages: MessageData.__post_init__"] == 20.0
    # not the serve frame above the loop, nor lean.py standing in for mitmproxy's server_event
    assert inc["kube-fault-proxy's own logic anywhere on the stack (not lean.py, hooks.py)"] == 40.0
    table = pb.markdown(b.as_dict(), b.as_dict())
    assert "| kube-fault-proxy (addon, engine, counters, journal, control) | 40 % | 40 % |" in table


def test_a_line_that_is_not_py_spy_raw_is_refused_by_its_text() -> None:
    with pytest.raises(ValueError, match="not a py-spy raw line: 'garbage'"):
        pb.read(["garbage"])


def test_real_py_spy_sample_of_mitmproxy_message_building(tmp_path: Path) -> None:
    script = tmp_path / "build.py"
    script.write_text(
        "import time\n"
        "from mitmproxy import http\n"
        "end = time.monotonic() + 3\n"
        "while time.monotonic() < end:\n"
        "    http.Request.make('POST', 'https://127.0.0.1/api/v1/namespaces/d/pods/p/binding', b'{}',\n"
        "                      {'content-type': 'application/json'})\n")
    out = tmp_path / "sample.txt"
    py_spy = Path(sys.executable).with_name("py-spy")  # blocking mode here: --nonblocking may miss most samples
    subprocess.run([str(py_spy), "record", "--rate", "200", "--format", "raw", "--output", str(out),
                    "--", sys.executable, str(script)], check=True, capture_output=True, timeout=60)
    lines = out.read_text().splitlines()
    pb.read(lines)  # every line of the file is read (the import's samples too)
    loop = ("<module> (build.py:4)", "<module> (build.py:5)", "<module> (build.py:6)")  # not the import (line 2)
    b = pb.read(line for line in lines if line.startswith(loop))  # the loop's samples
    assert b.total > 50, b.total
    mitm = sum(v for k, v in b.leaf.items() if k.startswith("mitmproxy"))
    assert mitm > b.total / 2, b.shares()  # the loop is mitmproxy's message building, and the rows see it
