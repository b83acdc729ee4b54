"""A trial's breaks judged against its ledger (what the journal says the faults did, invariants/ledger.py) by the
excuse rules (invariants/excuses.py). A trial whose every break is excused is the fault's own effect: never
confirmed, shrunk or filed as a finding (see known.py for the bugs already found)."""

from __future__ import annotations

from typing import Any

from kube_fault_proxy.rig.invariants import excuses
from kube_fault_proxy.rig.invariants.history import History
from kube_fault_proxy.rig.invariants.ledger import Ledger

REANNOUNCING = "touchPods"  # a workload action that updates every pod: a pod whose ADDED was dropped is seen again


def judge_trial(check: dict[str, Any], effects: Ledger, action: str | None, history: History | None = None,
                faults_end: float | None = None, t0: float | None = None) -> tuple[str | None, str | None]:
    """(why every break is the fault's own effect, or None; what the ledger excused and what it did not, or None
    when nothing broke)."""
    violations = check.get("violations") or []
    if not violations:
        return None, None
    judged = excuses.judge(violations, effects, history, faults_end, reannounced=action == REANNOUNCING, t0=t0)
    return (judged.text() if judged.fully_excused else None), judged.text()
