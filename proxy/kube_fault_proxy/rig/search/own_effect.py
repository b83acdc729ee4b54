"""A break that is the fault's own effect, not a bug: told from the journal (a pod whose own ADDED the proxy
dropped, and nothing re-announced it). Such a trial is never confirmed as a finding (see known.py for the bugs
already found)."""

from __future__ import annotations

from typing import Any

DROPPED_ADDED = "watch Pod ADDED -> dropped"  # trial._history's step for a dropEvents drop of a pod's ADDED
# What a scheduler that never saw the pod breaks (it also waits unbound past any bound).
EXPLAINED_BY_A_LOST_POD = frozenset({"stranded", "I3", "no-pod-waits-past-bound"})


def _pod(obj: str) -> str:
    """A violation's object (`ns/name` or a name) as the pod name the journal's history keys."""
    return obj.rsplit("/", 1)[-1]


def own_effect(check: dict[str, Any], history: dict[str, list[str]], action: str | None) -> str | None:
    """Why every break of a trial is the fault's own effect, from the journal, or None: each broken invariant is
    one a scheduler that never saw a pod breaks (stranded, no ask), and for each pod that breaks it the proxy
    dropped the pod's own ADDED event and nothing later re-announced the pod (no touchPods update)."""
    violations = check.get("violations") or []
    if not violations or action == "touchPods":
        return None
    pods: set[str] = set()
    for v in violations:
        if v.get("invariant") not in EXPLAINED_BY_A_LOST_POD or not v.get("objects"):
            return None
        pods |= {_pod(str(o)) for o in v["objects"]}
    if not all(DROPPED_ADDED in history.get(p, []) for p in pods):
        return None
    names = ", ".join(sorted(pods)[:3]) + (f" and {len(pods) - 3} more" if len(pods) > 3 else "")
    return (f"the proxy dropped the ADDED watch event of {names} (dropEvents) and nothing re-announced "
            f"{'it' if len(pods) == 1 else 'them'}: the scheduler never learned of the pod, as the fault makes it")
