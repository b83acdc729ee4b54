"""The founding scenario end to end on the real control plane, and the load and check commands."""

from __future__ import annotations

import datetime
import json
import re
import subprocess
import sys
from pathlib import Path

from kube_fault_proxy.cli.scenarios import DEMO_FIX, Contender, run_scenarios
from kube_fault_proxy.rig.cluster import build

from tests.support.cluster import start_cluster, stop_cluster
from tests.support.processes import ROOT

SCENARIO = ROOT / "scenarios" / "yunikorn-3355.yaml"


def test_kube_scheduler_recovers_from_the_outage(tmp_path: Path) -> None:
    code, table, out = run_scenarios(SCENARIO, ["kube-scheduler"], 1, 1, tmp_path / "report",
                                     ROOT / "fault_profiles", tmp_path / "state")
    run = json.loads((out / "kube-scheduler-seed-1" / "report.json").read_text())
    assert code == 0 and run["met"] is True, table
    assert run["check"]["verdict"] == "clean"
    assert run["check"]["counts"]["bound"] == 1000
    events = [e["event"] for e in run["events"]]
    assert "outage-start" in events and "outage-end" in events  # the fault really happened
    assert (out / "kube-scheduler-seed-1" / "timeline.svg").read_text().startswith("<svg")
    assert "| kube-scheduler | 1 | clean | yes |" in (out / "summary.md").read_text()


def test_yunikorn_strands_pods_with_phantom_allocations(tmp_path: Path) -> None:
    code, table, out = run_scenarios(SCENARIO, ["yunikorn"], 7, 1, tmp_path / "report",
                                     ROOT / "fault_profiles", tmp_path / "state")
    run = json.loads((out / "yunikorn-seed-7" / "report.json").read_text())
    assert code == 0 and run["met"] is True, table
    inv = run["check"]["invariants"]
    assert inv["stranded"]["violations"] > 0 and inv["I2"]["violations"] > 0 and not inv["I1"]["holds"]
    assert run["check"]["counts"]["phantomAllocations"] > 0
    summary = (out / "yunikorn-seed-7" / "summary.md").read_text()
    assert re.search(r"^I2 no-phantom-allocation +NO +\d", summary, re.M), summary  # the name beside the alias
    assert "verdict: **violations** (as expected)" in summary
    # Like a kill -9: YuniKorn hears of its failed binds when the outage starts, not when client-go's
    # HTTP/2 health check gives up on a connection the proxy left open (30 s idle + 15 s ping).
    start = next(e for e in run["events"] if e["event"] == "outage-start")
    end = next(e for e in run["events"] if e["event"] == "outage-end")
    assert end["clientConnectionsLingering"] == 0
    state = tmp_path / "state" / "yunikorn-7"
    assert not (state / "etcd").exists() and (state / "journal.jsonl").exists()  # logs kept, data not
    log = (state / "logs" / "yunikorn.log").read_text()
    failed_at = [datetime.datetime.fromisoformat(m).timestamp()  # "failed to bind pod" (not stack frames)
                 for m in re.findall(r"^(\S+)\tERROR\t\S+\tclient/kubeclient\.go:127\t", log, re.MULTILINE)]
    assert failed_at, "YuniKorn logged no failed bind"
    assert max(failed_at) - start["time"] < 10, f"last failed bind {max(failed_at) - start['time']:.0f}s after the outage"


def test_the_fix_closes_yunikorn_3355(tmp_path: Path) -> None:
    """YuniKorn v1.9.0 built with the fix that closes it (docs/records/yunikorn-3355-fixes.md), on the same
    scenario and seed as the v1.9.0 run above, which keeps showing the violations."""
    fix = build.yunikorn(DEMO_FIX)
    code, table, out = run_scenarios(SCENARIO, ["yunikorn"], 7, 1, tmp_path / "report", ROOT / "fault_profiles",
                                     tmp_path / "state", builds=[Contender("yunikorn", patch=DEMO_FIX)])
    name = f"yunikorn+{fix.variant}"
    run = json.loads((out / f"{name}-seed-7" / "report.json").read_text())
    assert code == 0 and run["met"] is True and run["expected"]["verdict"] == "clean", table
    assert run["check"]["verdict"] == "clean" and run["check"]["counts"]["bound"] == 1000
    assert run["check"]["counts"]["phantomAllocations"] == 0
    # the exact build, named by the report, the proxy's journal, cluster status and YuniKorn itself
    exact = f"yunikorn {fix.version}"
    assert run["build"] == exact and exact in (out / "summary.md").read_text()
    assert next(e for e in run["events"] if e["event"] == "activate")["build"] == exact
    state = tmp_path / "state" / f"{name}-7"
    status = kfp("cluster", "--state-dir", str(state), "status")
    assert status.returncode == 1 and json.loads(status.stdout)["schedulerBuild"] == exact  # down after the run
    log = (state / "logs" / "yunikorn.log").read_text()
    assert f"Build info: version={fix.version.lstrip('v')} " in log
    # the fault hit as hard as on v1.9.0: binds failed at the outage, and every pod was bound after all
    failed = re.findall(r"^\S+\tERROR\t\S+\tclient/kubeclient\.go:127\t", log, re.MULTILINE)
    assert failed, "YuniKorn logged no failed bind"


def kfp(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kube_fault_proxy", *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_load_check_and_clean_commands(tmp_path: Path) -> None:
    c = start_cluster(tmp_path / "c", "--nodes", "10", "--scheduler", "kube-scheduler", "--proxy")
    try:
        kc = str(c.kubeconfig("admin"))
        r = kfp("load", "pods", "--kubeconfig", kc, "--count", "60", "--rate", "100", "--namespace", "loadtest")
        assert r.returncode == 0 and "created 60/60 pods" in r.stdout, r.stderr
        r = kfp("check", "--kubeconfig", kc, "--scheduler-name", "default-scheduler", "--quiet", "5", "--grace", "0",
                "-o", str(tmp_path / "check.json"))
        assert r.returncode == 0, r.stdout
        assert json.loads((tmp_path / "check.json").read_text())["counts"]["bound"] == 60
        # pods for a scheduler that does not exist are stranded: check must say so and exit 1
        r = kfp("load", "pods", "--kubeconfig", kc, "--count", "3", "--scheduler-name", "nobody", "--namespace", "loadtest")
        assert r.returncode == 0
        r = kfp("check", "--kubeconfig", kc, "--scheduler-name", "nobody", "--quiet", "2", "--grace", "0")
        assert r.returncode == 1 and re.search(r"^stranded +NO +3\b", r.stdout, re.M), r.stdout  # the column fits the longest name
        r = kfp("load", "clean", "--kubeconfig", kc, "--namespace", "loadtest")
        assert r.returncode == 0 and r.stdout.strip() == "deleted 63 pods with namespace loadtest", r.stderr
        r = kfp("load", "pods", "--kubeconfig", kc, "--count", "5", "--namespace", "loadtest")  # made anew, at once
        assert r.returncode == 0 and "created 5/5 pods" in r.stdout, r.stderr
    finally:
        stop_cluster(c)
