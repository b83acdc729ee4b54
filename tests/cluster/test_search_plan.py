"""`kube-fault-proxy search --plan` on the real control plane: a planned search finds a planted bug, and a clean
target's plan finds nothing.

The planted bug is the mutation benchmark's `release-skips-forget` (bench/mutants/yunikorn/): YuniKorn v1.9.0 whose
answer to a release the shim asked for no longer forgets the assumed pod, so after a failed Binding the pod stays
assumed (`no-assumed-pod-left`, `I5`). A fault-free run never fails a Binding, so the reference run is clean. The plan
(`--kinds abort`, one point per group) fails the first Binding before it reaches the apiserver. YuniKorn as
released, the control (`build:released`), breaks YUNIKORN-3128's invariants under the same fault (a failed bind
is never retried): they are the faults' effect and the release's own bug, shared and left out, and the hit is
confirmed on what the released build kept. Until 2026-12-07 a shared break disqualified the whole hit, and a
search trial did not judge `I5` in its namespace, so the mutation benchmark's searches could not find this bug
(docs/records/mutation-benchmark-2026-12-06.md).

YuniKorn's REST port is fixed: the search stops its target's control plane before the control's starts. Run alone
in its module. The clean target is kube-scheduler, which retries a failed Binding."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.cluster import kfp
from tests.support.processes import ROOT

PLANTED = ROOT / "bench" / "mutants" / "yunikorn" / "release-skips-forget.patch"


def _search(out: Path, state: Path, per_group: int, *args: str) -> tuple[int, dict[str, Any], str]:
    """A planned search of 20 pods (the fewest it takes) on 2 nodes with Binding aborts only, its control planes down afterwards."""
    try:
        r = kfp("search", "--plan", "--plan-per-group", str(per_group), "--kinds", "abort", "--pods", "20", "--nodes", "2",
                "--seed", "5", "--budget", "8m", "--controls", "1", "--shrink-total", "0s", "--canary-every", "0",
                "-o", str(out), "--state-dir", str(state), *args, timeout=900)
    finally:  # a search that timed out leaves its control planes up (and YuniKorn's fixed port taken): stop them
        for left in state.glob("*/cluster.json"):
            kfp("cluster", "--state-dir", str(left.parent), "down", timeout=120)
    why = f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert (out / "search.json").is_file(), why
    return r.returncode, json.loads((out / "search.json").read_text()), why


def _covers_its_plan(out: Path, doc: dict[str, Any], why: str) -> dict[str, Any]:
    """The plan was made from a clean reference run, and every perturbation in it ran and landed at its point."""
    plan = json.loads((out / "plan.json").read_text())
    cov: dict[str, Any] = doc["plan"]
    assert doc["planError"] is None and (out / "reference.json").is_file(), why
    assert plan["perturbations"] and all("failed before it reached the apiserver (abort)" in p["what"]
                                         for p in plan["perturbations"]), plan["perturbations"]
    assert cov["points"] >= 1 and cov["pointsCovered"] == cov["points"], cov
    assert cov["perturbationsRun"] == cov["perturbationsLanded"] == cov["perturbations"] == len(plan["perturbations"])
    trials = [json.loads(line) for line in (out / "trials.jsonl").read_text().splitlines()]
    assert [t["name"] for t in trials if t["name"].startswith("p") and t["name"][1:].isdigit()] == [
        f"p{n}" for n in range(cov["perturbations"])], [t["name"] for t in trials]
    return cov


def test_a_planned_search_finds_a_planted_yunikorn_bug_beside_the_releases_own(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, doc, why = _search(out, tmp_path / "state", 1, "--scheduler", "yunikorn", "--yunikorn-patch", str(PLANTED),
                             "--control", "build:released")
    assert code == 1, why
    _covers_its_plan(out, doc, why)
    assert doc["controlBuild"] == "yunikorn v1.9.0", doc["controlBuild"]
    # The planted bug, confirmed on what the released build kept under the same fault: the pod left assumed (I5,
    # no-assumed-pod-left, judged in the trial's namespace).
    [hit] = [h for h in doc["hits"] if h["verdict"] == "confirmed"]
    target = sorted(set(hit["broken"]) & set(hit["replay"]) - set(hit["shared"]))
    assert target == ["I5"] and "I5" not in hit["control"], hit
    # The release's own bug under it (YUNIKORN-3128: the failed bind never retried) is shared, not the finding.
    assert hit["shared"] and set(hit["shared"]) <= set(hit["control"]), hit
    [finding] = doc["findings"]
    assert finding["target"] == target and finding["known"] is None, finding
    report = (out / "report.md").read_text()
    assert f"trial {hit['trial']}: {', '.join(target)} confirmed, {', '.join(hit['shared'])} shared" in report


def test_a_planned_search_of_a_clean_target_finds_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, doc, why = _search(out, tmp_path / "state", 2, "--scheduler", "kube-scheduler", "--control", "none")
    assert code == 0, why
    cov = _covers_its_plan(out, doc, why)
    assert cov["perturbations"] == 2, cov  # the first and the last Binding, each aborted once
    assert doc["hits"] == [] and doc["findings"] == [], doc["hits"]
