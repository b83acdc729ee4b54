"""What a search covered, from its trials: per fault kind and per rule form (a kind on a match) the trials that
drew it, those where it injected and those that broke an invariant; the shapes and origins drawn; the novelty
seen; the invariants judged; the crash points acted on. A record of what was searched, found or not."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kube_fault_proxy.rig.search.genome import fault_kind
from kube_fault_proxy.rig.search.precheck import form
from kube_fault_proxy.rig.search.trial import TrialResult


def _drawn(trials: Iterable[TrialResult], key: Any) -> dict[str, dict[str, int]]:
    """Per key of a rule (its kind, its form): trials that drew it, where it injected, that broke something."""
    out: dict[str, dict[str, int]] = {}
    for t in trials:
        if t.error:
            continue
        keys = {key(r) for r in t.genome.rules}
        fired = {key(r) for r in t.genome.rules if r["name"] in t.fired}
        for k in keys:
            row = out.setdefault(k, {"trials": 0, "injected": 0, "broke": 0})
            row["trials"] += 1
            row["injected"] += k in fired
            row["broke"] += bool(t.broken) and k in fired
    return out


def coverage(trials: Sequence[TrialResult], kinds: Sequence[str], tokens: int, novel: int,
             dead: Iterable[str] = ()) -> dict[str, Any]:
    """The search trials' coverage (canaries and confirmation runs aside); every asked kind has a row, drawn or not."""
    by_kind = _drawn(trials, fault_kind)
    judged: set[str] = set()
    for t in trials:
        judged |= set(t.check.get("invariants") or {})
    origins = Counter("fresh" if t.genome.origin == "random" else t.genome.origin for t in trials)
    return {
        "kinds": {k: by_kind.get(k, {"trials": 0, "injected": 0, "broke": 0}) for k in kinds},
        "forms": dict(sorted(_drawn(trials, form).items())),
        "deadForms": sorted(dead),
        "shapes": dict(sorted(Counter(t.genome.shape for t in trials).items())),
        "origins": dict(sorted(origins.items())),
        "actions": dict(sorted(Counter(t.genome.action or "none" for t in trials).items())),
        "trialActions": dict(sorted(Counter(a["do"] for t in trials for a in t.genome.churn).items())),
        "trialActionsDone": sum(t.actions_done for t in trials),
        "noveltyTokens": tokens,
        "novelTrials": novel,
        "errors": sum(1 for t in trials if t.error),
        "crashPoints": sum(1 for t in trials for e in t.events if e.get("event") == "scheduler-killed"),
        "invariantsJudged": sorted(judged),
    }


def lines(cov: Mapping[str, Any]) -> list[str]:
    """The coverage as report.md shows it."""
    kinds = cov["kinds"]
    out = ["| fault kind | trials drawn | fired | fired, and the trial broke an invariant |", "|---|---|---|---|"]
    out += [f"| {k} | {r['trials']} | {r['injected']} | {r['broke']} |" for k, r in kinds.items()]
    never = [k for k, r in kinds.items() if not r["injected"]]
    out += ["", f"- rule forms (kind on a match) drawn: {len(cov['forms'])}; injected at least once: "
                f"{sum(1 for r in cov['forms'].values() if r['injected'])}"
                + (f"; learned dead (ran, never injected): {', '.join(cov['deadForms'])}" if cov["deadForms"] else ""),
            "- kinds that never fired: " + (", ".join(never) or "none")
            + " (fired: the proxy injected it; a kind that edits watch events, when it edited one)",
            "- shapes: " + ", ".join(f"{s} {n}" for s, n in cov["shapes"].items()),
            "- trials drawn fresh or mutated: " + ", ".join(f"{o} {n}" for o, n in cov["origins"].items()),
            "- workload actions: " + ", ".join(f"{a} {n}" for a, n in cov["actions"].items()),
            "- trial actions (node and pod churn during the load) drawn: "
            + (", ".join(f"{a} {n}" for a, n in cov.get("trialActions", {}).items()) or "none")
            + f"; done: {cov.get('trialActionsDone', 0)}",
            f"- novelty: {cov['noveltyTokens']} distinct per-pod fault sequences and phase events seen; "
            f"{cov['novelTrials']} trials showed a new one",
            f"- crash points acted on (scheduler killed and restarted): {cov['crashPoints']}; trials that "
            f"errored: {cov['errors']}",
            "- invariants judged in each trial's namespace: " + (", ".join(cov["invariantsJudged"]) or "-")]
    return out
