"""Scenario reports side by side: the same wave under different faults (the proxy's outage, a real kill -9
of kube-apiserver) or builds, one column each, and where their numbers part."""

from __future__ import annotations

import statistics
from typing import Any

from kube_fault_proxy.rig.runs.report import column_name

# How a run's fault shows in its events: (start event, end event, what to call it).
METHODS = (("outage-start", "outage-end", "proxy outage"), ("apiserver-killed", "apiserver-restarted",
                                                             "kill -9 of kube-apiserver"))


def runs_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs of a report.json: a multi-run report's `runs`, or the one run a run directory holds."""
    runs = doc.get("runs", [doc])
    if not runs or not all(isinstance(r, dict) and "counts" in r.get("check", {}) and "seconds" in r for r in runs):
        raise KeyError("no scenario runs (each has check.counts and seconds)")
    return list(runs)


def fault(run: dict[str, Any]) -> dict[str, Any]:
    """The run's fault: its method, when it began (seconds into the run, and after the wave's release when
    the load was held back), and how long the apiserver was gone for the scheduler."""
    events = run.get("events", [])
    for start, end, method in METHODS:
        began = next((e for e in events if e["event"] == start), None)
        if began is None:
            continue
        ended = next((e for e in events if e["event"] == end and e["t"] >= began["t"]), None)
        down = ended.get("downSeconds") if ended is not None else None
        if down is None and ended is not None and "time" in began and "time" in ended:
            down = ended["time"] - began["time"]
        wave = run.get("wave")
        return {"method": method, "t": began["t"], "afterWave": None if not wave else began["t"] - float(wave["t"]),
                "down": down}
    return {"method": "none", "t": None, "afterWave": None, "down": None}


def figures(run: dict[str, Any]) -> dict[str, float | None]:
    """The numbers the comparison is made of, for one run (None: the run does not have it)."""
    b, counts = run.get("binds") or {}, run["check"]["counts"]
    before = (b.get("beforeOutage") or {}).get("succeeded")
    failed, committed = b.get("failed"), b.get("committedWithoutAnswer")
    share = None if failed is None or committed is None or failed + committed == 0 else \
        100 * committed / (failed + committed)
    f = fault(run)
    return {"fault at (s after the wave's release)": f["afterWave"] if f["afterWave"] is not None else f["t"],
            "apiserver gone (s)": f["down"],
            "binds answered before the fault": before,
            "binds failed": failed,
            "committed without an answer": committed,
            "share of unanswered binds committed (%)": share,
            "binds throttled": b.get("throttled"),
            "pods bound": counts.get("bound"),
            "stranded": run["check"]["invariants"].get("stranded", {}).get("violations", 0),
            "phantom allocations": counts.get("phantomAllocations"),
            "run time (s)": run["seconds"]}


def _num(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 or float(v).is_integer() else f"{v:.1f}"


def spread(values: list[float | None]) -> str:
    """The median and range of a column's runs: `242 (139-469)`; one run, its value; none, `-`."""
    vs = sorted(float(v) for v in values if v is not None)
    if not vs:
        return "-"
    mid = _num(statistics.median(vs))
    return mid if vs[0] == vs[-1] else f"{mid} ({_num(vs[0])}-{_num(vs[-1])})"


def groups(runs: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Runs by scenario and build, in the order given: each is a column."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        out.setdefault(f"{r['scenario']} · {column_name(r)}", []).append(r)
    return out


def compare_table(runs: list[dict[str, Any]]) -> str:
    """One column per scenario and build, one row per figure (median and range over its runs), and how the
    median of committed-without-an-answer compares with the first column's."""
    cols = groups(runs)
    firsts = list(cols.values())
    keys = list(figures(runs[0]))
    rows = ["| | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols),
            "| runs (seeds) | " + " | ".join(f"{len(rs)} ({', '.join(str(r['seed']) for r in rs)})"
                                             for rs in firsts) + " |",
            "| fault | " + " | ".join(", ".join(dict.fromkeys(fault(r)["method"] for r in rs)) for rs in firsts) + " |",
            "| as expected | " + " | ".join(f"{sum(1 for r in rs if r.get('met'))} of {len(rs)}" for rs in firsts)
            + " |"]
    per = [[figures(r) for r in rs] for rs in firsts]
    rows += [f"| {k} | " + " | ".join(spread([f[k] for f in fs]) for fs in per) + " |" for k in keys]
    base = _median(per[0], "committed without an answer")
    if len(cols) > 1 and base:
        rows.append("| committed without an answer, against the first column | "
                    + " | ".join("1x" if i == 0 else _ratio(_median(fs, "committed without an answer"), base)
                                 for i, fs in enumerate(per)) + " |")
    return "\n".join(rows)


def _median(fs: list[dict[str, float | None]], key: str) -> float | None:
    vs = [v for f in fs if (v := f[key]) is not None]
    return statistics.median(vs) if vs else None


def _ratio(v: float | None, base: float) -> str:
    return "-" if v is None else f"{v / base:.2f}x"


RUN_HEADERS = ("column", "seed", "fault at (s after release)", "gone (s)", "answered before", "failed",
               "committed unanswered", "throttled", "bound", "stranded", "phantoms", "verdict", "seconds")


def run_table(runs: list[dict[str, Any]]) -> str:
    """Every run on a row of its own."""
    rows = ["| " + " | ".join(RUN_HEADERS) + " |", "|---" * len(RUN_HEADERS) + "|"]
    for name, rs in groups(runs).items():
        for r in rs:
            f = figures(r)
            cells = [name, r["seed"], *(spread([f[k]]) for k in (
                "fault at (s after the wave's release)", "apiserver gone (s)", "binds answered before the fault",
                "binds failed", "committed without an answer", "binds throttled", "pods bound", "stranded",
                "phantom allocations")), r["check"]["verdict"], r["seconds"]]
            rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(rows)


def compare(runs: list[dict[str, Any]]) -> str:
    """The side by side as Markdown: the columns' figures, then every run."""
    return "\n".join(["## Side by side", "", compare_table(runs), "", "## Every run", "", run_table(runs), ""])
