"""Scenario reports: JSON, a Markdown summary, and a self-contained timeline picture (SVG in HTML)."""

from __future__ import annotations

import html
import itertools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

W, H = 960, 380
LEFT, RIGHT, TOP, BOTTOM = 60, 20, 50, 60
COLORS = {"bound": "#2b6cb0", "pending": "#dd6b20", "ok": "#38a169", "failed": "#e53e3e", "throttled": "#d69e2e",
          "outage": "#fed7d7", "profile": "#e9d8fd", "step": "#4a5568", "killed": "#feebc8", "wave": "#805ad5"}


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _rates(samples: list[dict[str, Any]]) -> list[tuple[float, float, float, float]]:
    """(t, succeeded/s, failed/s, throttled/s) between consecutive samples (a report written before
    throttled Bindings were counted apart has none: they are in its failed ones)."""
    out = []
    for a, b in itertools.pairwise(samples):
        dt = max(b["t"] - a["t"], 1e-6)
        ok = (b["bindsSucceeded"] - a["bindsSucceeded"]) / dt
        throttled = (b.get("bindsThrottled", 0) - a.get("bindsThrottled", 0)) / dt
        out.append((b["t"], ok, (b["bindsFailed"] - a["bindsFailed"]) / dt, throttled))
    return out


def _windows(events: list[dict[str, Any]], start: str, end: str, t_end: float) -> list[tuple[float, float, str]]:
    spans, opened = [], None
    for e in events:
        if e["event"] == start and opened is None:
            opened = e
        elif e["event"] == end and opened is not None:
            spans.append((opened["t"], e["t"], str(opened.get("profile", ""))))
            opened = None
    if opened is not None:
        spans.append((opened["t"], t_end, str(opened.get("profile", ""))))
    return spans


@dataclass(frozen=True)
class _Plot:
    """The plot area: seconds run along x up to `t_end`, pods up y to `total`."""

    t_end: float
    total: float
    pw: float = W - LEFT - RIGHT
    ph: float = H - TOP - BOTTOM

    def x(self, t: float) -> float:
        return float(LEFT + self.pw * t / self.t_end)

    def y(self, v: float) -> float:
        return float(TOP + self.ph - self.ph * v / self.total)


def timeline_svg(run: dict[str, Any]) -> str:
    """The run as a picture: pods bound and pending, binds/s succeeded, failed and throttled, fault windows."""
    samples, events = run["samples"], run["events"]
    t_end = max([s["t"] for s in samples] + [e["t"] for e in events] + [1.0])
    plot = _Plot(t_end, max([s["pods"] for s in samples] + [run["load"].get("requested", 1), 1]))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
             'font-family="sans-serif" font-size="11">', f'<rect width="{W}" height="{H}" fill="white"/>']
    parts += _windows_drawn(events, plot)
    parts += _bind_bars(_rates(samples), plot)
    parts += _pod_lines_and_steps(samples, run.get("steps", []), plot)
    parts += _axes(plot)
    parts += _title_and_legend(run)
    parts.append("</svg>")
    return "\n".join(parts)


def _windows_drawn(events: list[dict[str, Any]], plot: _Plot) -> list[str]:
    """Outages, kills and profile bands as shaded windows; released waves as lines."""
    x, ph, t_end = plot.x, plot.ph, plot.t_end
    parts = []
    for a, b, _ in _windows(events, "outage-start", "outage-end", t_end):
        parts.append(f'<rect x="{x(a):.1f}" y="{TOP}" width="{max(x(b) - x(a), 1):.1f}" height="{ph}" '
                     f'fill="{COLORS["outage"]}"/><text x="{x(a) + 3:.1f}" y="{TOP + 12}" fill="#9b2c2c">outage</text>')
    for a, b, _ in _windows(events, "apiserver-killed", "apiserver-restarted", t_end):  # the real kill -9
        parts.append(f'<rect x="{x(a):.1f}" y="{TOP}" width="{max(x(b) - x(a), 1):.1f}" height="{ph}" '
                     f'fill="{COLORS["killed"]}"/><text x="{x(a) + 3:.1f}" y="{TOP + 40}" fill="#9c4221">'
                     'apiserver killed</text>')
    for a, b, _ in _windows(events, "scheduler-killed", "scheduler-restarted", t_end):  # a crash (killScheduler)
        parts.append(f'<rect x="{x(a):.1f}" y="{TOP}" width="{max(x(b) - x(a), 1):.1f}" height="{ph}" '
                     f'fill="{COLORS["killed"]}"/><text x="{x(a) + 3:.1f}" y="{TOP + 68}" fill="#9c4221">'
                     'scheduler killed</text>')
    for a, b, _ in _windows(events, "scheduler-stopped", "scheduler-restarted", t_end):  # a graceful stop
        parts.append(f'<rect x="{x(a):.1f}" y="{TOP}" width="{max(x(b) - x(a), 1):.1f}" height="{ph}" '
                     f'fill="{COLORS["killed"]}"/><text x="{x(a) + 3:.1f}" y="{TOP + 68}" fill="#9c4221">'
                     'scheduler stopped</text>')
    for a, b, _ in _windows(events, "controller-manager-killed", "controller-manager-restarted", t_end):  # correlated
        parts.append(f'<rect x="{x(a):.1f}" y="{TOP + ph - 24}" width="{max(x(b) - x(a), 1):.1f}" height="24" '
                     f'fill="{COLORS["killed"]}"/><text x="{x(a) + 3:.1f}" y="{TOP + ph - 8}" fill="#9c4221">'
                     'controller manager killed</text>')
    for e in (e for e in events if e["event"] == "wave-released"):
        wx = x(e["t"])
        parts.append(f'<line x1="{wx:.1f}" x2="{wx:.1f}" y1="{TOP}" y2="{TOP + ph}" stroke="{COLORS["wave"]}" '
                     f'stroke-width="2"/><text x="{wx + 3:.1f}" y="{TOP + 54}" fill="{COLORS["wave"]}">'
                     f'wave released ({_esc(e.get("pending"))} pending)</text>')
    for a, b, name in _windows(events, "activate", "deactivate", t_end):
        parts.append(f'<rect x="{x(a):.1f}" y="{TOP - 14}" width="{max(x(b) - x(a), 1):.1f}" height="10" '
                     f'fill="{COLORS["profile"]}"/><text x="{x(a) + 3:.1f}" y="{TOP - 6}" fill="#553c9a">'
                     f'{_esc(name)}</text>')
    return parts


def _bind_bars(rates: list[tuple[float, float, float, float]], plot: _Plot) -> list[str]:
    """Binds/s between samples: succeeded, failed on top, throttled on top of that."""
    x, pw, ph = plot.x, plot.pw, plot.ph
    peak = max([r[1] + r[2] + r[3] for r in rates] + [1.0])
    width = max(pw / max(len(rates), 1) - 1, 1)
    parts = []
    for t, ok, failed, throttled in rates:
        h_ok, h_bad, h_slow = (ph * 0.35 * v / peak for v in (ok, failed, throttled))
        parts.append(f'<rect x="{x(t) - width:.1f}" y="{TOP + ph - h_ok:.1f}" width="{width:.1f}" '
                     f'height="{h_ok:.1f}" fill="{COLORS["ok"]}" opacity="0.55"/>')
        if h_bad:
            parts.append(f'<rect x="{x(t) - width:.1f}" y="{TOP + ph - h_ok - h_bad:.1f}" width="{width:.1f}" '
                         f'height="{h_bad:.1f}" fill="{COLORS["failed"]}" opacity="0.8"/>')
        if h_slow:  # stacked on top: retried by client-go, not failures the scheduler heard of
            parts.append(f'<rect x="{x(t) - width:.1f}" y="{TOP + ph - h_ok - h_bad - h_slow:.1f}" '
                         f'width="{width:.1f}" height="{h_slow:.1f}" fill="{COLORS["throttled"]}" opacity="0.8"/>')
    return parts


def _pod_lines_and_steps(samples: list[dict[str, Any]], steps: list[dict[str, Any]], plot: _Plot) -> list[str]:
    """Pods bound and pending as lines; each scenario step as a dashed line with its name."""
    x, y, ph = plot.x, plot.y, plot.ph
    parts = []
    for key in ("bound", "pending"):
        pts = " ".join(f"{x(s['t']):.1f},{y(s[key]):.1f}" for s in samples)
        parts.append(f'<polyline points="{pts}" fill="none" stroke="{COLORS[key]}" stroke-width="2"/>')
    for step in steps:
        sx = x(step["t"])
        parts.append(f'<line x1="{sx:.1f}" x2="{sx:.1f}" y1="{TOP}" y2="{TOP + ph}" '
                     f'stroke="{COLORS["step"]}" stroke-dasharray="3,3"/>')
        if not step["did"].startswith(("activate", "deactivate")):  # those have the profile band
            parts.append(f'<text x="{sx + 3:.1f}" y="{TOP + 26}" fill="{COLORS["step"]}">{_esc(step["did"])}</text>')
    return parts


def _axes(plot: _Plot) -> list[str]:
    """Both axes, with six ticks each: seconds and pods."""
    pw, ph = plot.pw, plot.ph
    parts = [f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{TOP + ph}" y2="{TOP + ph}" stroke="#333"/>',
             f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + ph}" stroke="#333"/>']
    for i in range(6):
        t = plot.t_end * i / 5
        parts.append(f'<text x="{plot.x(t):.1f}" y="{TOP + ph + 14}" text-anchor="middle">{t:.0f}s</text>')
        v = plot.total * i / 5
        parts.append(f'<text x="{LEFT - 6}" y="{plot.y(v) + 4:.1f}" text-anchor="end">{v:.0f}</text>')
    return parts


def _title_and_legend(run: dict[str, Any]) -> list[str]:
    """The scenario, build, seed and verdict above; whether it went as expected; the legend below."""
    parts = []
    verdict = run["check"].get("verdict", "?")
    broken = [k for k, v in run["check"].get("invariants", {}).items() if not v["holds"]]
    title = (f'{run["scenario"]} · {run.get("build") or run["scheduler"]} · seed {run["seed"]} · {verdict}'
             + (f' ({", ".join(broken)})' if broken else ""))
    met = run.get("met")
    parts.append(f'<text x="{LEFT}" y="20" font-size="14" font-weight="bold">{_esc(title)}</text>')
    if met is not None:
        parts.append(f'<text x="{W - RIGHT}" y="20" font-size="13" text-anchor="end" '
                     f'fill="{"#276749" if met else "#c53030"}">{"as expected" if met else "NOT as expected"}</text>')
    legend = [("bound", "pods bound"), ("pending", "pods pending"), ("ok", "binds/s ok"), ("failed", "binds/s failed"),
              ("throttled", "binds/s throttled"), ("outage", "outage"), ("profile", "profile active"),
              ("step", "scenario step")]
    for i, (key, label) in enumerate(legend):
        lx = LEFT + i * 110
        mark = (f'<line x1="{lx}" x2="{lx + 12}" y1="{H - 16}" y2="{H - 16}" stroke="{COLORS[key]}" '
                'stroke-dasharray="3,3" stroke-width="2"/>' if key == "step" else
                f'<rect x="{lx}" y="{H - 22}" width="12" height="12" fill="{COLORS[key]}"/>')
        parts.append(f'{mark}<text x="{lx + 16}" y="{H - 12}">{label}</text>')
    return parts


def _binds(b: dict[str, Any]) -> str:
    before = b.get("beforeOutage")
    text = (f"{b['succeeded']} succeeded"
            + (f" ({before['succeeded']} before the outage)" if before else "")
            + f", {b['failed']} failed, {b['committedWithoutAnswer']} committed without an answer")
    if "throttled" in b:  # absent from reports written before throttled ones were counted apart from failed
        text += f", {b['throttled']} throttled (429 with Retry-After: client-go sent them again itself)"
    if b.get("clientConnectionsAccepted") is not None:
        text += f"; {b['clientConnectionsAccepted']} client connections accepted by the proxy"
    return text


def _seconds(value: object) -> str:
    return "-" if value is None else f"{float(str(value)):.3g}s"


def bind_latency_text(b: dict[str, Any]) -> str:
    """A run's bind latency in a line: count, quantiles (estimated from the proxy's buckets) and the largest."""
    if not b.get("count"):
        return "no bind committed"
    largest = _seconds(b["maxSeconds"]) if b.get("maxExact") else f"≤ {_seconds(b['maxSeconds'])}"
    return (f"{b['count']} binds; p50 {_seconds(b['p50Seconds'])}, p90 {_seconds(b['p90Seconds'])}, "
            f"p99 {_seconds(b['p99Seconds'])} (estimated from the proxy's buckets), max {largest}")


def _latency_cell(b: dict[str, Any] | None) -> str:
    """p50 / p99 / max, or "-"."""
    if not b or not b.get("count"):
        return "-"
    largest = _seconds(b["maxSeconds"]) if b.get("maxExact") else f"≤{_seconds(b['maxSeconds'])}"
    return f"{_seconds(b['p50Seconds'])} / {_seconds(b['p99Seconds'])} / {largest}"


def _wave(w: dict[str, Any]) -> str:
    how = {"schedulingGates": "scheduling gates lifted", "beforeScheduler": "scheduler started"}.get(
        str(w.get("holdBack")), str(w.get("holdBack")))
    rate = w.get("bindsPerSecond")
    return (f"released at {w['t']}s with {w['pending']} pods pending ({how} in {w['releaseSeconds']}s); "
            f"{w.get('waveBound', 0)} bound"
            + (f" in {w['boundSeconds']}s: {rate} binds/s" if rate is not None else ""))


def run_markdown(run: dict[str, Any], table: str) -> str:
    """One run's summary."""
    c = run["check"]
    lines = [f"## {run['scheduler']} · seed {run['seed']}", "",
             f"- verdict: **{c['verdict']}**" + ("" if run.get("met") is None else
                                                  f" ({'as expected' if run['met'] else 'NOT as expected'})"),
             *([f"- build: {run['build']}"] if run.get("build") else []),
             f"- load: {run['load'].get('created')} pods created at {run['load'].get('ratePerSecond')}/s",
             "- counts: " + ", ".join(f"{k} {v}" for k, v in c["counts"].items()),
             "- steps: " + "; ".join(f"{s['t']}s {s['did']}" for s in run.get("steps", [])),
             *([f"- binds (as the scheduler saw them): {_binds(run['binds'])}"] if run.get("binds") else []),
             *([f"- bind latency (a pod's first Binding POST to its commit): {bind_latency_text(run['bindLatency'])}"]
               if run.get("bindLatency") else []),
             *([f"- wave (held back: {run['wave']['holdBack']}): {_wave(run['wave'])}"] if run.get("wave") else []),
             f"- took {run['seconds']}s; timeline: [timeline.html](timeline.html)", "", "```", table, "```", ""]
    return "\n".join(lines)


def write_run(directory: Path, run: dict[str, Any], table: str) -> None:
    """report.json, summary.md, timeline.svg and timeline.html for one run."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "report.json").write_text(json.dumps(run, indent=1))
    (directory / "summary.md").write_text(run_markdown(run, table))
    svg = timeline_svg(run)
    (directory / "timeline.svg").write_text(svg)
    (directory / "timeline.html").write_text(
        f"<!doctype html><meta charset='utf-8'><title>{_esc(run['scenario'])}</title>"
        f"<body style='font-family:sans-serif'>{svg}<pre>{_esc(table)}</pre></body>")


SUMMARY_HEADERS = ("scheduler", "seed", "verdict", "as expected", "pods", "bound", "stranded", "phantom allocs",
                   "broken invariants", "binds ok (before outage) / failed / committed unanswered / throttled",
                   "seconds", "build")


def _bind_cell(b: dict[str, Any]) -> str:
    if not b:
        return "-"
    before = b.get("beforeOutage")
    return (f"{b['succeeded']}" + (f" ({before['succeeded']})" if before else "")
            + f" / {b['failed']} / {b['committedWithoutAnswer']} / {b.get('throttled', '-')}")


def summary_rows(runs: list[dict[str, Any]], no: str = "**no**") -> list[tuple[object, ...]]:
    """One row per run for the side-by-side table (`no` is how a missed expectation is written)."""
    rows: list[tuple[object, ...]] = []
    for r in runs:
        inv, counts = r["check"]["invariants"], r["check"]["counts"]
        broken = ", ".join(k for k, v in inv.items() if not v["holds"]) or "-"
        met = {True: "yes", False: no, None: "-"}[r.get("met")]
        rows.append((r["scheduler"], r["seed"], r["check"]["verdict"], met, counts.get("pods"), counts.get("bound"),
                     inv.get("stranded", {}).get("violations", 0), counts.get("phantomAllocations", "-"), broken,
                     _bind_cell(r.get("binds") or {}), r["seconds"], r.get("build") or "-"))
    return rows


def write_summary_text(runs: list[dict[str, Any]]) -> str:
    """The side-by-side table over every run, as Markdown."""
    head = "| " + " | ".join(SUMMARY_HEADERS) + " |\n" + "|---" * len(SUMMARY_HEADERS) + "|"
    rows = ["| " + " | ".join(str(cell) for cell in row) + " |" for row in summary_rows(runs)]
    text = "\n".join([f"# {runs[0]['scenario'] if runs else 'scenario'}", "", head, *rows, ""])
    builds = [r.get("build") or r["scheduler"] for r in runs]
    if len(set(builds)) > 1 and len(set(builds)) == len(builds):
        text += "\n## Side by side\n\n" + compare_table(runs) + "\n"
    elif len(set(builds)) > 1:
        text += "\n## Per build\n\n" + per_build_table(runs) + "\n"
    return text


def write_summary(directory: Path, runs: list[dict[str, Any]]) -> str:
    """The side-by-side table over every run, written to summary.md (and returned)."""
    text = write_summary_text(runs)
    (directory / "summary.md").write_text(text + "\n" + "\n".join(
        f"- [{column_name(r)} seed {r['seed']}]({r['dir']}/summary.md)" for r in runs if "dir" in r) + "\n")
    (directory / "report.json").write_text(json.dumps({"runs": runs}, indent=1))
    return text


def column_name(run: dict[str, Any]) -> str:
    """A run's column heading: the scheduler, and for a YuniKorn build or a patched kube-scheduler its version
    and patch."""
    build = str(run.get("build") or run["scheduler"])
    name, _, version = build.partition(" ")
    pretty = {"kube-scheduler": "kube-scheduler", "yunikorn": "YuniKorn"}.get(name, name)
    if not version or (name == "kube-scheduler" and "+" not in version):
        return pretty
    return f"{pretty} {re.sub(r'-[0-9a-f]{12}$', '', version).replace('+', ' + ', 1)}"


def compare_table(runs: list[dict[str, Any]]) -> str:
    """One column per run (kube-scheduler, YuniKorn v1.9.0, YuniKorn v1.9.0 + a fix, …): the verdict
    and the numbers that make it, as Markdown."""
    def cell(r: dict[str, Any], key: str) -> str:
        c, inv = r["check"], r["check"]["invariants"]
        match key:
            case "verdict":
                return f"**{c['verdict']}**"
            case "as expected":
                return {True: "yes", False: "**no**", None: "-"}[r.get("met")]
            case "stranded":
                return str(inv.get("stranded", {}).get("violations", 0))
            case "phantom allocations":
                return str(c["counts"].get("phantomAllocations", "-"))
            case "broken invariants":
                return ", ".join(k for k, v in inv.items() if not v["holds"]) or "-"
            case "seconds":
                return str(r["seconds"])
            case "bind latency p50 / p99 / max":
                return _latency_cell(r.get("bindLatency"))
            case "build":
                return f"`{r['build'].partition(' ')[2]}`" if r.get("build") else "-"
        return str(c["counts"].get(key, "-"))

    keys = ["verdict", "as expected", "pods", "bound", "stranded", "phantom allocations", "broken invariants",
            *(["bind latency p50 / p99 / max"] if any(r.get("bindLatency") for r in runs) else []), "seconds", "build"]
    head = "| | " + " | ".join(f"{column_name(r)} (seed {r['seed']})" for r in runs) + " |"
    rule = "|---|" + "---|" * len(runs)
    return "\n".join([head, rule, *(f"| {k} | " + " | ".join(cell(r, k) for r in runs) + " |" for k in keys)])


def per_build_table(runs: list[dict[str, Any]]) -> str:
    """One row per build over its runs: how many met the expectation, stranded pods and phantom
    allocations per run, and how often each invariant broke."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault(str(r.get("build") or r["scheduler"]), []).append(r)
    rows = ["| build | runs | as expected | stranded per run | phantom allocs per run | broken invariants (runs) |",
            "|---|---|---|---|---|---|"]
    for name, rs in groups.items():
        met = sum(1 for r in rs if r.get("met"))
        expected = f"{met}/{len(rs)}" if any(r.get("met") is not None for r in rs) else "-"
        stranded = ", ".join(str(r["check"]["invariants"].get("stranded", {}).get("violations", 0)) for r in rs)
        phantoms = ", ".join(str(r["check"]["counts"].get("phantomAllocations", "-")) for r in rs)
        broken: dict[str, int] = {}
        for r in rs:
            for k, v in r["check"]["invariants"].items():
                if not v["holds"]:
                    broken[k] = broken.get(k, 0) + 1
        rows.append(f"| `{name}` | {len(rs)} | {expected} | {stranded} | {phantoms} | "
                    + (", ".join(f"{k} ({n})" for k, n in broken.items()) or "-") + " |")
    return "\n".join(rows)
