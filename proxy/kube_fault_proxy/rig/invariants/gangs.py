"""What gang scheduling promises, judged on a recorded history of Pods and PodGroups, and whether the scheduler
still schedules once the gangs are quiet.

`gang-all-or-nothing`: the scheduler admits a gang's members only when minCount of them can be placed at once.
Binding is per pod and may fail and be retried, so a gang is partly bound for a while; in v1.37.2 its members
wait at Permit for at most `permitTimeoutDuration` (5 minutes, gangscheduling.go), and v1.38.0-beta.0 has no
timeout of its own. So a gang breaks the promise only if, `timeout` seconds after its first member was bound
(and at the history's end), fewer than minCount members were ever bound, but some. Members bound and deleted
since still count (the promise is about admission; a deleted pod leaves a bound gang legally short), and
minCount is the smallest the PodGroup ever had (it may change, and "modifications to this field do not affect
already-scheduled pods").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kube_fault_proxy.rig.invariants.catalogue import Violation
from kube_fault_proxy.rig.invariants.history import History
from kube_fault_proxy.rig.invariants.placement import Obj, ref

ALL_OR_NOTHING = "gang-all-or-nothing"
NOT_STUCK = "scheduler-not-stuck"
NAMES = (ALL_OR_NOTHING, NOT_STUCK)
PERMIT_TIMEOUT = 300.0  # v1.37.2 gangscheduling.go, permitTimeoutDuration = 5 * time.Minute


def min_count(group: Obj) -> int | None:
    """A gang PodGroup's minCount; None for any other policy."""
    gang = ((group.get("spec") or {}).get("schedulingPolicy") or {}).get("gang")
    return None if gang is None else int(gang["minCount"])


def group_of(pod: Obj) -> str | None:
    """The PodGroup a pod belongs to (spec.schedulingGroup.podGroupName), if any."""
    return (pod["spec"].get("schedulingGroup") or {}).get("podGroupName")


@dataclass
class _Gang:
    min_count: int
    bound: dict[str, float] = field(default_factory=dict)  # member uid -> when it was first seen bound


def judge_gangs(history: History, timeout: float = PERMIT_TIMEOUT) -> list[Violation]:
    """`gang-all-or-nothing` over a history: each gang PodGroup whose members ever bound are fewer than its
    minCount, but not none, both `timeout` seconds after its first bind and when the history ends."""
    gangs: dict[tuple[str, str], _Gang] = {}
    for change in history.ordered():
        obj, meta = change.obj, change.obj["metadata"]
        key = (meta.get("namespace", ""), meta.get("name", ""))
        if change.kind == "PodGroup" and change.type != "DELETED":
            count = min_count(obj)
            if count is not None:
                gang = gangs.setdefault(key, _Gang(count))
                gang.min_count = min(gang.min_count, count)
        elif change.kind == "Pod" and obj["spec"].get("nodeName") and group_of(obj):
            member_of = gangs.get((key[0], group_of(obj) or ""))
            if member_of is not None:
                member_of.bound.setdefault(meta["uid"], change.t)
    out = []
    for (namespace, name), gang in sorted(gangs.items()):
        if not gang.bound or len(gang.bound) >= gang.min_count:
            continue
        since = min(gang.bound.values())
        if history.end - since <= timeout:
            continue
        out.append(Violation(ALL_OR_NOTHING, f"PodGroup {namespace}/{name} has {len(gang.bound)} of minCount "
                             f"{gang.min_count} members bound, {history.end - since:.0f}s after its first bind "
                             f"(timeout {timeout:g}s)", (f"{namespace}/{name}",),
                             numbers={"bound": len(gang.bound), "minCount": gang.min_count,
                                      "seconds": round(history.end - since, 1), "timeout": timeout}))
    return out


def short_gangs(pods: list[Obj], groups: list[Obj]) -> dict[str, str]:
    """The gangs (PodGroup name -> why) with fewer live members than their minCount: their pending members wait
    at PreEnqueue for members that will never come ("the pods in the group are scheduled only when minCount of
    them can be", KEP-4671), so a pending member of one is not stranded."""
    counts = {g["metadata"]["name"]: c for g in groups if (c := min_count(g)) is not None}
    live: dict[str, int] = {}
    for pod in pods:
        group = group_of(pod)
        if group is not None and not pod["metadata"].get("deletionTimestamp"):
            live[group] = live.get(group, 0) + 1
    return {name: f"PodGroup {name} has {live.get(name, 0)} live members of minCount {count}"
            for name, count in counts.items() if live.get(name, 0) < count}


def excuse_short_gangs(violations: list[Violation], pods: list[Obj],
                       groups: list[Obj]) -> tuple[list[Violation], list[tuple[Violation, str]]]:
    """(violations kept, `stranded` violations of members of short gangs with the reason each is not one)."""
    short = short_gangs(pods, groups)
    group_by_ref = {ref(p): group_of(p) for p in pods}
    kept, excused = [], []
    for v in violations:
        group = group_by_ref.get(v.objects[0]) if v.invariant == "stranded" and v.objects else None
        if group is not None and group in short:
            excused.append((v, short[group]))
        else:
            kept.append(v)
    return kept, excused


def not_stuck(probe: str, seconds: float | None, bound: float) -> list[Violation]:
    """`scheduler-not-stuck`: a probe pod created once the gangs were quiet was bound within `bound` seconds
    (`seconds`: how long it took; None: it never was)."""
    if seconds is not None and seconds <= bound:
        return []
    how = "was never bound" if seconds is None else f"was bound only after {seconds:.1f}s"
    return [Violation(NOT_STUCK, f"probe pod {probe}, which fits, {how} (bound {bound:g}s)", (probe,),
                      numbers={"bound": bound, **({"seconds": round(seconds, 1)} if seconds is not None else {})})]
