"""`kube-fault-proxy search` on the real control plane: YuniKorn v1.9.0 under test, kube-scheduler
as the control, every fault kind but `outage`; it must find a confirmed violation and shrink it.

The search starts its own two control planes (one per scheduler) and stops them; run it alone
in its module, since YuniKorn's REST port is fixed. Seed 1 is fixed so the run is repeatable: the
grammar draws the same trials from it every time, what YuniKorn does with them is up to YuniKorn."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from kube_fault_proxy.rig.cluster.control_plane import Cluster
from kube_fault_proxy.rig.cluster.processes import group_alive
from kube_fault_proxy.rig.scenario import load_scenario

from tests.support.cluster import kfp


def test_search_finds_confirms_and_shrinks_a_yunikorn_violation(tmp_path: Path) -> None:
    out, state = tmp_path / "out", tmp_path / "state"
    try:
        # One search trial: it finds, confirms and shrinks one case in CI's time. (With its 3 minutes the search goes
        # on to further hits, each shrunk and replayed on its own: 8-12 min, past this test's budget.)
        r = kfp("search", "--scheduler", "yunikorn", "--control", "kube-scheduler", "--budget", "3m", "--seed", "1",
                "--max-trials", "1", "--exclude-kinds", "outage", "--shrink-budget", "120s", "-o", str(out),
                "--state-dir", str(state), timeout=720)
    finally:  # a search that timed out leaves its control planes up (and YuniKorn's fixed port taken): stop them
        for scheduler in ("yunikorn", "kube-scheduler"):
            if (state / scheduler / "cluster.json").exists():
                kfp("cluster", "--state-dir", str(state / scheduler), "down", timeout=120)
    assert r.returncode == 1, f"exit {r.returncode}\n{r.stdout}\n{r.stderr[-4000:]}"
    doc = json.loads((out / "search.json").read_text())
    confirmed = [h for h in doc["hits"] if h["verdict"] == "confirmed"]
    # The search goes on after its first confirmed hit until the budget ends (issue 21): every confirmed hit left
    # its control clean, and each is filed under exactly one finding, the first of which is the top-level case.
    assert confirmed and all(h["control"] == [] for h in confirmed), doc["hits"]
    assert doc["target"] and set(doc["target"]) <= set(confirmed[0]["broken"]) & set(confirmed[0]["replay"])
    findings = doc["findings"]
    assert sorted(n for f in findings for n in f["trials"]) == sorted(h["trial"] for h in confirmed), findings
    assert findings[0]["target"] == doc["target"] and findings[0]["trials"][0] == confirmed[0]["trial"]
    for f in findings:
        assert (out / f["dir"] / "report.md").is_file() and (out / f["dir"] / "minimal-profile.yaml").is_file(), f
    assert "## Findings: " in (out / "report.md").read_text()
    # No outage anywhere: not in the trials searched, not in the minimal case.
    trials = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    assert trials and all('"outage"' not in t["genome"] for t in trials)
    # Shrunk to at most 2 rules, still loader-valid, still leaving the control clean.
    assert 1 <= len(doc["minimal"]["rules"]) <= 2, doc["minimal"]
    assert kfp("profiles", "validate", str(out / "minimal-profile.yaml"), timeout=60).returncode == 0
    profile = yaml.safe_load((out / "minimal-profile.yaml").read_text())
    assert [rule["name"] for rule in profile["spec"]["rules"]] == [rule["name"] for rule in doc["minimal"]["rules"]]
    assert doc["minimalControl"] == []
    # Replayed 5 times; it must reproduce the same invariants in most of them.
    assert len(doc["replays"]) == 5 and doc["reproduced"] >= 3, doc["replays"]
    assert load_scenario(out / "replay-scenario.yaml").spec.timeline[0].activate == "search-minimal"
    report = (out / "report.md").read_text()
    assert "## Shrink log" in report and "## Witness pods" in report and f"search replay {out}" in report
    # The first reproducing replay as a picture: sampled while it ran, with the profile's window.
    svg = (out / "timeline.svg").read_text()
    assert "(timeline.svg)" in report and svg.startswith("<svg") and "search-minimal" in svg
    points = svg.split("<polyline points=\"")[1].split("\"")[0].split()
    assert len(points) >= 3, points
    assert doc["trials"] >= 1 and doc["medianTrialSeconds"] <= 30
    # Both control planes are down.
    for scheduler in ("yunikorn", "kube-scheduler"):
        c = Cluster(state / scheduler)
        assert c.state.get("processes") == {}, c.state.get("processes")  # the state file says so, not only the accessor
    leftover = [p for p in json.loads((state / "yunikorn" / "cluster.json").read_text()).get("processes", {}).values()
                if group_alive(int(p["pid"]))]
    assert leftover == []
