"""Where the proxy's CPU goes: a py-spy sample of it, broken down by library and by mitmproxy layer.

`bench/scheduler --sample-proxy` records the proxy with py-spy (`record --format raw`: one line per
distinct stack, "frame;frame;…;leaf count", each frame "function (path:line)", outermost first)
for the whole wave of each proxied arm, then reads it here into two tables:

- **leaf**: each sample counted once, by the code it was executing (the innermost frame): h2 and
  hpack, asyncio and the sockets under it, mitmproxy's HTTP layers, the rest of mitmproxy's proxy
  core, its message models, pyOpenSSL, contextlib, this proxy's own code, … The shares add up to 100 %.
- **inclusive**: the samples with a given piece of machinery anywhere on their stack inside the
  event loop's callback (frames above the loop's `Handle._run`, such as the serve command that
  started the loop, are not looked at; a sample can count in several rows): a task per hook, type
  checks on messages, the addon dispatch, our code.

Run by hand on a saved sample: `python bench/profile_breakdown.py sample.txt` prints the tables.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

# Our modules that replace mitmproxy's own dispatch: machinery, not the proxy's logic.
GLUE = ("kube_fault_proxy/proxy/mitm/patches/inline_hooks.py", "kube_fault_proxy/proxy/mitm/patches/dispatch.py")

# (row, predicate on the frame's "function (path:line)" text), first match wins, for the leaf table.
_FRAME = re.compile(r"^(?P<func>.*) \((?P<path>[^()]*?)(?::\d+)?\)$")

LEAF_ROWS: list[tuple[str, tuple[str, ...]]] = [
    ("h2 + hpack (frame and header coding)", ("h2/", "hpack/")),
    ("mitmproxy Http2Connection (layers/http/_http2.py)", ("mitmproxy/proxy/layers/http/_http2.py",)),
    ("mitmproxy HTTP/1 (layers/http/_http1.py)", ("mitmproxy/proxy/layers/http/_http1.py",)),
    ("mitmproxy HttpLayer, HttpStream (layers/http/__init__.py)", ("mitmproxy/proxy/layers/http/__init__.py",)),
    ("mitmproxy other HTTP layer code", ("mitmproxy/proxy/layers/http/",)),
    ("mitmproxy TLS layer", ("mitmproxy/proxy/layers/tls.py", "mitmproxy/addons/tlsconfig.py")),
    ("mitmproxy proxy core (server, layer, tunnel, commands, events)", ("mitmproxy/proxy/",)),
    ("mitmproxy message models (http.py, headers, coretypes)", ("mitmproxy/http.py", "mitmproxy/coretypes/",
                                                                "mitmproxy/net/")),
    ("mitmproxy type checks (utils/typecheck)", ("mitmproxy/utils/typecheck.py",)),
    ("mitmproxy addon manager, hooks, flow", ("mitmproxy/addonmanager.py", "mitmproxy/hooks.py",
                                              "mitmproxy/flow.py", "mitmproxy/eventsequence.py")),
    ("mitmproxy other", ("mitmproxy/",)),
    ("pyOpenSSL + cryptography (memory-BIO TLS)", ("OpenSSL/", "cryptography/")),
    ("asyncio (event loop, transports, tasks) + selectors, socket, ssl", ("asyncio/", "selectors.py", "socket.py",
                                                                          "ssl.py")),
    ("contextlib", ("contextlib.py",)),
    ("kube-fault-proxy's stand-ins for mitmproxy's dispatch (mitm/patches: inline_hooks, dispatch)", GLUE),
    ("kube-fault-proxy (addon, engine, counters, journal, control)", ("kube_fault_proxy/",)),
    ("json", ("json/",)),
    ("logging", ("logging/",)),
    ("FastAPI / starlette / uvicorn / pydantic (control plane)", ("fastapi/", "starlette/", "uvicorn/", "pydantic",
                                                                 "anyio/", "h11/")),
    ("dataclasses, enum, typing, abc, functools", ("dataclasses.py", "enum.py", "typing.py", "abc.py",
                                                    "functools.py")),
]
OTHER = "other (stdlib and the rest)"
NO_FRAME = "no Python frame (native code between bytecodes)"  # py-spy writes these with an empty stack

# (row, function-name or path fragments) that count a sample if any frame of its stack matches.
INCLUSIVE_ROWS: list[tuple[str, tuple[str, ...]]] = [
    ("a task per hook: ConnectionHandler.hook_task", ("hook_task",)),
    ("asyncio_utils.create_task (task creation, debug info)", ("mitmproxy/utils/asyncio_utils.py",)),
    ("type checks on messages: MessageData.__post_init__", ("MessageData.__post_init__", "check_option_type")),
    ("addon dispatch: AddonManager.trigger_event / handle_lifecycle", ("trigger_event", "handle_lifecycle")),
    ("kube-fault-proxy's own logic anywhere on the stack (not lean.py, hooks.py)", ("kube_fault_proxy/",)),
    ("server_event (mitmproxy's, or lean.py's in its place)", ("server_event",)),
    ("contextlib generator context managers", ("contextlib.py",)),
    ("logging", ("logging/",)),
]


@dataclass
class Breakdown:
    """The sample's tables: samples per row, and the total."""

    total: int = 0
    leaf: Counter[str] = field(default_factory=Counter)
    inclusive: Counter[str] = field(default_factory=Counter)

    def shares(self) -> dict[str, dict[str, float]]:
        """Percent of all samples per row, largest first."""
        def pct(c: Counter[str]) -> dict[str, float]:
            return {k: round(100 * v / self.total, 1) for k, v in c.most_common()} if self.total else {}
        return {"leaf": pct(self.leaf), "inclusive": pct(self.inclusive)}

    def as_dict(self) -> dict[str, object]:
        """JSON form: the sample count and both tables' shares."""
        return {"samples": self.total, **self.shares()}


def _split(frame: str) -> tuple[str, str]:
    m = _FRAME.match(frame.strip())
    return (m["func"], m["path"]) if m else (frame.strip(), "")


def leaf_row(frame: str) -> str:
    """The leaf table's row of the innermost frame."""
    _, path = _split(frame)
    for row, fragments in LEAF_ROWS:
        if any(f in path for f in fragments):
            return row
    return OTHER


def _inside_callback(frames: list[str]) -> list[str]:
    """The frames inside the innermost event-loop callback (all of them if there is none)."""
    for i in range(len(frames) - 1, -1, -1):
        if "asyncio/events.py" in frames[i] and "Handle._run" in frames[i]:
            return frames[i + 1:]
    return frames


def read(lines: Iterable[str]) -> Breakdown:
    """Tally a py-spy raw (collapsed-stack) sample."""
    out = Breakdown()
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            continue
        stack, space, count_text = line.rpartition(" ")
        if not space or not count_text.isdigit():
            raise ValueError(f"not a py-spy raw line: {line[:120]!r}")
        count = int(count_text)
        frames = stack.split(";") if stack else []
        out.total += count
        out.leaf[leaf_row(frames[-1]) if frames else NO_FRAME] += count
        inner = _inside_callback(frames)
        logic = [fr for fr in inner if not any(g in fr for g in GLUE)]
        for row, fragments in INCLUSIVE_ROWS:
            if any(f in fr for fr in (logic if fragments == ("kube_fault_proxy/",) else inner) for f in fragments):
                out.inclusive[row] += count
    return out


def markdown(before: dict[str, object], after: dict[str, object] | None = None) -> str:
    """The records' table of one breakdown, or of two side by side (before, after)."""
    def table(kind: str) -> list[str]:
        b = before[kind]
        a = after[kind] if after else None
        assert isinstance(b, dict) and (a is None or isinstance(a, dict))
        head = f"| {kind} | share |" if a is None else f"| {kind} | before | after |"
        rows = [head, "|---|---|" if a is None else "|---|---|---|"]
        for k in list(b) + [k for k in (a or {}) if k not in b]:
            tail = "" if a is None else f" {a.get(k, 0):g} % |"
            rows.append(f"| {k} | {b.get(k, 0):g} % |{tail}")
        return rows
    return "\n".join([*table("leaf"), "", *table("inclusive")])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sample", type=Path, help="py-spy record --format raw output")
    p.add_argument("--after", type=Path, default=None, help="a second sample, shown beside the first")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    args = p.parse_args()
    before = read(args.sample.read_text().splitlines()).as_dict()
    after = read(args.after.read_text().splitlines()).as_dict() if args.after else None
    print(json.dumps({"before": before, "after": after}, indent=1) if args.json else markdown(before, after))
    return 0


if __name__ == "__main__":
    sys.exit(main())
