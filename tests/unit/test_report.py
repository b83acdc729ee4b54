"""The run report: timeline picture, per-run and side-by-side summaries."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.rig.runs import report

NS = "{http://www.w3.org/2000/svg}"


def a_run(met: bool | None = True) -> dict[str, Any]:
    samples = [{"t": float(t), "pods": 100, "bound": min(10 * t, 60), "pending": 100 - min(10 * t, 60),
                "bindsSucceeded": min(10 * t, 50), "bindsThrottled": 5 if t >= 7 else 0,
                "bindsFailed": 4 if t >= 5 else 0} for t in range(11)]
    return {
        "scenario": "s<1>", "scheduler": "yunikorn", "seed": 3, "met": met, "seconds": 12.5,
        "load": {"requested": 100, "created": 100, "ratePerSecond": 90.0},
        "samples": samples,
        "events": [{"t": 0.0, "event": "activate", "profile": "outage&co"},
                   {"t": 4.0, "event": "outage-start"}, {"t": 6.0, "event": "outage-end"}],
        "steps": [{"t": 0.0, "did": "activate outage&co (seed 3)"}, {"t": 8.0, "did": "touched 100 pods"}],
        "check": {"verdict": "violations", "counts": {"pods": 100, "bound": 60, "phantomAllocations": 40},
                  "invariants": {"stranded": {"holds": False, "violations": 40},
                                 "I1": {"holds": False, "violations": 1}, "I3": {"holds": True, "violations": 0}}},
    }


def texts(svg: str) -> list[str]:
    return [t.text or "" for t in ET.fromstring(svg).iter(f"{NS}text")]


def test_timeline_is_well_formed_and_shows_windows_steps_and_verdict() -> None:
    svg = report.timeline_svg(a_run())
    root = ET.fromstring(svg)  # escaping holds: '<', '&' in names do not break the XML
    words = texts(svg)
    assert "s<1> · yunikorn · seed 3 · violations (stranded, I1)" in words
    assert "as expected" in words and "outage" in words and "outage&co" in words
    assert "touched 100 pods" in words  # non-profile steps are labelled; activations have their band
    assert not any(w.startswith("activate") for w in words)
    assert "scenario step" in words
    # outage window: 4 s..6 s of a 10 s run on a 880 px plot starting at x=60
    outage = [r for r in root.iter(f"{NS}rect") if r.get("fill") == report.COLORS["outage"]
              and float(r.get("height", 0)) > 20]
    assert len(outage) == 1
    assert float(outage[0].get("x", 0)) == 60 + 880 * 0.4
    assert float(outage[0].get("width", 0)) == 880 * 0.2
    # failed binds drawn only where the failed counter moved (between t=4 and t=5)
    failed = [r for r in root.iter(f"{NS}rect") if r.get("fill") == report.COLORS["failed"]
              and r.get("opacity") is not None]
    assert len(failed) == 1
    # throttled ones (client-go retried them) apart from the failed, where their counter moved (t=6..7)
    throttled = [r for r in root.iter(f"{NS}rect") if r.get("fill") == report.COLORS["throttled"]
                 and r.get("opacity") is not None]
    assert len(throttled) == 1 and float(throttled[0].get("x", 0)) + float(throttled[0].get("width", 0)) == \
        pytest.approx(60 + 880 * 0.7, abs=0.1)
    assert "binds/s throttled" in words


def test_not_as_expected_is_red() -> None:
    svg = report.timeline_svg(a_run(met=False))
    assert re.search(r'fill="#c53030">NOT as expected<', svg)


def test_written_reports_agree(tmp_path: Path) -> None:
    run = a_run()
    report.write_run(tmp_path / "yunikorn-seed-3", run, "TABLE")
    assert json.loads((tmp_path / "yunikorn-seed-3" / "report.json").read_text()) == run
    md = (tmp_path / "yunikorn-seed-3" / "summary.md").read_text()
    assert "- verdict: **violations** (as expected)" in md
    assert "- steps: 0.0s activate outage&co (seed 3); 8.0s touched 100 pods" in md
    html = (tmp_path / "yunikorn-seed-3" / "timeline.html").read_text()
    assert "<title>s&lt;1&gt;</title>" in html and "http" not in html.replace("http://www.w3.org/2000/svg", "")
    text = report.write_summary(tmp_path, [{**run, "dir": "yunikorn-seed-3"}])
    assert "| yunikorn | 3 | violations | yes | 100 | 60 | 40 | 40 | stranded, I1 | - | 12.5 |" in text
    assert json.loads((tmp_path / "report.json").read_text())["runs"][0]["seed"] == 3


def test_report_command_reprints_a_report_and_names_a_bad_one(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from kube_fault_proxy.cli.main import main

    report.write_summary(tmp_path, [{**a_run(), "dir": "yunikorn-seed-3"}])
    assert main(["report", str(tmp_path)]) == 0
    assert "| yunikorn | 3 | violations | yes |" in capsys.readouterr().out
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "report.json").write_text('{"runs": [{"scheduler": "x"}]}')
    assert main(["report", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: not a scenario report (KeyError" in err
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "not a scenario report (FileNotFoundError" in capsys.readouterr().err


def test_bind_outcomes_say_what_the_scheduler_heard_before_and_after_the_outage() -> None:
    from kube_fault_proxy.rig.runs.run_record import RunResult
    from kube_fault_proxy.rig.runs.runner import bind_outcomes

    run = RunResult("s", "yunikorn", 3)
    run.samples = [{"t": 0.0, "bindsSucceeded": 5, "bindsThrottled": 0, "bindsFailed": 1,
                    "clientConnectionsAccepted": 2},
                   {"t": 9.0, "bindsSucceeded": 85, "bindsThrottled": 9, "bindsFailed": 121,
                    "clientConnectionsAccepted": 4}]
    run.events = [{"t": 4.0, "event": "outage-start", "bindsSucceeded": 45, "bindsThrottled": 3, "bindsFailed": 1}]
    binds = bind_outcomes(run, {"counts": {"bound": 130}})
    assert binds == {"succeeded": 80, "throttled": 9, "failed": 120, "committedWithoutAnswer": 50,
                     "beforeOutage": {"succeeded": 40, "throttled": 3, "failed": 0}, "clientConnectionsAccepted": 2}
    md = report.run_markdown({**a_run(), "binds": binds}, "TABLE")
    assert ("- binds (as the scheduler saw them): 80 succeeded (40 before the outage), 120 failed, "
            "50 committed without an answer, 9 throttled (429 with Retry-After: client-go sent them again itself); "
            "2 client connections accepted by the proxy") in md
    assert "| 80 (40) / 120 / 50 / 9 |" in report.write_summary_text([{**a_run(), "binds": binds}])
    # a report written before throttled Bindings were counted apart reads as it did, with no throttled count
    old = {k: v for k, v in binds.items() if k != "throttled"}
    assert "| 80 (40) / 120 / 50 / - |" in report.write_summary_text([{**a_run(), "binds": old}])
    assert "50 committed without an answer; 2 client" in report.run_markdown({**a_run(), "binds": old}, "TABLE")


LATENCY = {"count": 40, "p50Seconds": 0.18, "p90Seconds": 2.9, "p99Seconds": 4.75, "maxSeconds": 5.0,
           "maxExact": False, "sumSeconds": 30.1}


def test_bind_latency_is_in_the_run_summary_and_both_tables() -> None:
    run = {**a_run(), "bindLatency": LATENCY}
    md = report.run_markdown(run, "TABLE")
    assert ("- bind latency (a pod's first Binding POST to its commit): 40 binds; p50 0.18s, p90 2.9s, p99 4.75s "
            "(estimated from the proxy's buckets), max ≤ 5s") in md
    exact = report.run_markdown({**run, "bindLatency": {**LATENCY, "maxSeconds": 4.91, "maxExact": True}}, "TABLE")
    assert "max 4.91s" in exact
    off = {**run, "build": "kube-scheduler v1.38.0-beta.0 SchedulerAsyncAPICalls=false", "scheduler": "kube-scheduler"}
    on = {**off, "build": "kube-scheduler v1.38.0-beta.0 SchedulerAsyncAPICalls=true",
          "bindLatency": {**LATENCY, "p50Seconds": 0.02}}
    table = report.compare_table([off, on])
    assert "| bind latency p50 / p99 / max | 0.18s / 4.75s / ≤5s | 0.02s / 4.75s / ≤5s |" in table


def test_a_run_with_no_commit_or_no_reading_says_so() -> None:
    assert "no bind committed" in report.run_markdown({**a_run(), "bindLatency": {**LATENCY, "count": 0}}, "T")
    assert "bind latency" not in report.run_markdown(a_run(), "T")
    assert "bind latency" not in report.compare_table([a_run(), {**a_run(), "seed": 4}]), "runs from before it"
    assert "| bind latency p50 / p99 / max | - | - |" in report.compare_table(
        [a_run(), {**a_run(), "seed": 4, "bindLatency": {**LATENCY, "count": 0}}])


def test_a_patched_kube_scheduler_is_named_by_its_build_in_the_columns() -> None:
    released = {**a_run(), "scheduler": "kube-scheduler", "build": "kube-scheduler v1.37.2"}
    patched = {**released, "build": "kube-scheduler v1.37.2+bind-error-keeps-assumed-pod-ee40cb12860b"}
    assert report.column_name(released) == "kube-scheduler"
    assert report.column_name(patched) == "kube-scheduler v1.37.2 + bind-error-keeps-assumed-pod"
    assert "| | kube-scheduler (seed 3) | kube-scheduler v1.37.2 + bind-error-keeps-assumed-pod (seed 3) |" in (
        report.compare_table([released, patched]))
