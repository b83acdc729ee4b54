"""Reports side by side: the proxy's outage beside a real kill, per column and per run, and the report command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.rig.runs import compare


def a_run(scenario: str, seed: int, how: str, before: int, failed: int, committed: int, stranded: int,
          seconds: float = 100.0) -> dict[str, Any]:
    """A held-back run (wave released at 5 s) whose fault began at 8 s: the proxy's outage or a kill."""
    if how == "outage":
        events = [{"t": 5.0, "event": "wave-released"},
                  {"t": 8.0, "event": "outage-start", "time": 1000.0, "bindsSucceeded": before},
                  {"t": 18.0, "event": "outage-end", "time": 1010.0}]
    else:
        events = [{"t": 5.0, "event": "wave-released"}, {"t": 8.0, "event": "apiserver-killed", "time": 1000.0},
                  {"t": 21.0, "event": "apiserver-restarted", "downSeconds": 13.4}]
    return {"scenario": scenario, "scheduler": "yunikorn", "build": "yunikorn v1.9.0", "seed": seed, "met": True,
            "seconds": seconds, "events": events, "wave": {"t": 5.0},
            "binds": {"succeeded": 3000 - stranded - committed, "failed": failed, "committedWithoutAnswer": committed,
                      "throttled": 0, "beforeOutage": {"succeeded": before}},
            "check": {"verdict": "violations", "counts": {"pods": 3000, "bound": 3000 - stranded,
                                                          "phantomAllocations": stranded},
                      "invariants": {"stranded": {"holds": False, "violations": stranded}}}}


OUTAGE = [a_run("seed-scale", 1, "outage", 210, 1000, 600, 400), a_run("seed-scale", 2, "outage", 230, 900, 500, 300),
          a_run("seed-scale", 3, "outage", 250, 800, 400, 200)]
KILL = [a_run("seed-scale-kill", 1, "kill", 240, 1100, 100, 700), a_run("seed-scale-kill", 2, "kill", 260, 1000, 50, 500)]


def test_the_fault_is_read_from_the_runs_events() -> None:
    assert compare.fault(OUTAGE[0]) == {"method": "proxy outage", "t": 8.0, "afterWave": 3.0, "down": 10.0}
    assert compare.fault(KILL[0]) == {"method": "kill -9 of kube-apiserver", "t": 8.0, "afterWave": 3.0, "down": 13.4}
    bare = {**OUTAGE[0], "events": [], "wave": None}
    assert compare.fault(bare) == {"method": "none", "t": None, "afterWave": None, "down": None}


@pytest.mark.parametrize(("values", "expected"), [
    ([600, 400, 500], "500 (400-600)"), ([7], "7"), ([None, 3, 3], "3"), ([], "-"), ([None], "-"),
    ([12.25, 13.5], "12.9 (12.2-13.5)"), ([1500, 2500], "2,000 (1,500-2,500)"),
])
def test_a_column_shows_the_median_and_the_range(values: list[float | None], expected: str) -> None:
    assert compare.spread(values) == expected


def test_columns_by_scenario_and_build_with_medians_and_the_ratio_to_the_first() -> None:
    table = compare.compare_table(OUTAGE + KILL)
    lines = table.splitlines()
    assert lines[0] == "| | seed-scale · YuniKorn v1.9.0 | seed-scale-kill · YuniKorn v1.9.0 |"
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:] for line in lines[2:]}
    assert rows["runs (seeds)"] == ["3 (1, 2, 3)", "2 (1, 2) |"]
    assert rows["fault"] == ["proxy outage", "kill -9 of kube-apiserver |"]
    assert rows["as expected"] == ["3 of 3", "2 of 2 |"]
    assert rows["fault at (s after the wave's release)"] == ["3", "3 |"]
    assert rows["apiserver gone (s)"] == ["10", "13.4 |"]
    assert rows["binds answered before the fault"] == ["230 (210-250)", "250 (240-260) |"]
    assert rows["committed without an answer"] == ["500 (400-600)", "75 (50-100) |"]
    # 1,000 failed and 600 committed: 37.5 % of the binds never answered 2xx were bound all the same; the kill
    # runs 100 of 1,200 (8.3 %) and 50 of 1,050 (4.8 %), median 6.5
    assert rows["share of unanswered binds committed (%)"] == ["35.7 (33.3-37.5)", "6.5 (4.8-8.3) |"]
    assert rows["stranded"] == ["300 (200-400)", "600 (500-700) |"]
    assert rows["phantom allocations"] == ["300 (200-400)", "600 (500-700) |"]
    assert rows["committed without an answer, against the first column"] == ["1x", "0.15x |"]


def test_every_run_has_a_row() -> None:
    lines = compare.run_table(OUTAGE + KILL).splitlines()
    assert len(lines) == 2 + 5
    assert lines[2] == ("| seed-scale · YuniKorn v1.9.0 | 1 | 3 | 10 | 210 | 1,000 | 600 | 0 | 2,600 | 400 | 400 "
                        "| violations | 100.0 |")
    assert lines[-1].startswith("| seed-scale-kill · YuniKorn v1.9.0 | 2 | 3 | 13.4 | 260 | 1,000 | 50 |")


def test_a_report_is_its_runs_or_its_one_run() -> None:
    assert compare.runs_of({"runs": OUTAGE}) == OUTAGE
    assert compare.runs_of(KILL[0]) == [KILL[0]]
    for bad in ({"runs": []}, {"runs": [{"scheduler": "x"}]}, {"seed": 1}):
        with pytest.raises(KeyError):
            compare.runs_of(bad)


def test_the_report_command_puts_several_reports_side_by_side(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    from kube_fault_proxy.cli.main import main

    (tmp_path / "outage").mkdir()
    (tmp_path / "outage" / "report.json").write_text(json.dumps({"runs": OUTAGE}))
    (tmp_path / "kill-seed-1").mkdir()
    (tmp_path / "kill-seed-1" / "report.json").write_text(json.dumps(KILL[0]))  # a run's own directory
    assert main(["report", str(tmp_path / "outage"), str(tmp_path / "kill-seed-1")]) == 0
    out = capsys.readouterr().out
    assert "| | seed-scale · YuniKorn v1.9.0 | seed-scale-kill · YuniKorn v1.9.0 |" in out
    assert "| runs (seeds) | 3 (1, 2, 3) | 1 (1) |" in out and "## Every run" in out
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "report.json").write_text('{"runs": [{"scheduler": "x"}]}')
    assert main(["report", str(tmp_path / "outage"), str(tmp_path / "bad")]) == 2
    assert f"{tmp_path / 'bad'}: not a scenario report (KeyError" in capsys.readouterr().err
