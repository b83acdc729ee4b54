"""Gang scheduling's promises on constructed histories: a gang left partly bound past the timeout is caught; a
gang bound whole, one still binding within the timeout, one whose bound members were deleted since and one that
never started are clean; the scheduler-not-stuck probe."""

from __future__ import annotations

from typing import Any

import pytest
from kube_fault_proxy.rig.invariants.catalogue import Violation
from kube_fault_proxy.rig.invariants.gangs import (
    ALL_OR_NOTHING,
    NOT_STUCK,
    PERMIT_TIMEOUT,
    excuse_short_gangs,
    judge_gangs,
    not_stuck,
    short_gangs,
)
from kube_fault_proxy.rig.invariants.history import Change, History
from kube_fault_proxy.rig.workloads import gang

Obj = dict[str, Any]


def member(i: int, node: str = "") -> Obj:
    pod = gang.member("g", i, "w", "1")
    pod["metadata"]["uid"] = f"g-{i}"
    pod["spec"]["nodeName"] = node
    return pod


def history(binds: list[tuple[float, int]], end: float, min_count: int = 3, members: int = 4,
            deleted: tuple[int, ...] = ()) -> History:
    """A PodGroup and its members created at t=0..; member i bound at each (t, i); some deleted after."""
    changes = [Change(0.0, "PodGroup", "ADDED", gang.pod_group("g", "w", min_count, "g"))]
    changes += [Change(0.1, "Pod", "ADDED", member(i)) for i in range(members)]
    changes += [Change(t, "Pod", "MODIFIED", member(i, "n1")) for t, i in binds]
    changes += [Change(end - 1, "Pod", "DELETED", member(i, "n1")) for i in deleted]
    for rv, c in enumerate(changes, 1):
        c.obj["metadata"]["resourceVersion"] = str(rv)
    return History(changes, 0.0, end)


def test_a_gang_left_partly_bound_past_the_timeout_is_caught() -> None:
    [v] = judge_gangs(history([(5.0, 0), (5.2, 1)], end=5.0 + PERMIT_TIMEOUT + 10))
    assert v.invariant == ALL_OR_NOTHING and v.objects == ("w/g",)
    assert v.numbers == {"bound": 2, "minCount": 3, "seconds": PERMIT_TIMEOUT + 10, "timeout": PERMIT_TIMEOUT}


@pytest.mark.parametrize(("binds", "end", "deleted"), [
    ([(5.0, 0), (5.1, 1), (5.2, 2)], 1000.0, ()),  # bound whole (minCount 3 of 4)
    ([(5.0, 0), (5.1, 1)], 5.0 + PERMIT_TIMEOUT - 1, ()),  # still binding, within the timeout
    ([(5.0, 0), (5.1, 1), (5.2, 2)], 1000.0, (0, 1)),  # bound whole, two deleted since
    ([], 1000.0, ()),  # nothing admitted: all or nothing's nothing
])
def test_legal_gangs_are_clean(binds: list[tuple[float, int]], end: float, deleted: tuple[int, ...]) -> None:
    assert judge_gangs(history(binds, end, deleted=deleted)) == []


def test_min_count_is_the_smallest_the_group_had() -> None:
    h = history([(5.0, 0), (5.1, 1)], end=1000.0)
    lowered = gang.pod_group("g", "w", 2, "g")
    lowered["metadata"]["resourceVersion"] = "1"
    h.changes.insert(1, Change(0.05, "PodGroup", "MODIFIED", lowered))
    assert judge_gangs(h) == []


def test_a_basic_podgroup_is_not_a_gang() -> None:
    h = history([(5.0, 0)], end=1000.0)
    h.changes[0].obj["spec"]["schedulingPolicy"] = {"basic": {}}
    assert judge_gangs(h) == []


def test_a_probe_that_binds_within_the_bound_is_clean_and_one_that_does_not_is_caught() -> None:
    assert not_stuck("w/probe", 1.5, 30) == []
    [late] = not_stuck("w/probe", 45.0, 30)
    [never] = not_stuck("w/probe", None, 30)
    assert late.invariant == never.invariant == NOT_STUCK
    assert "was bound only after 45.0s" in late.message and "was never bound" in never.message


def stranded(i: int) -> Violation:
    return Violation("stranded", f"w/g-{i} is Pending with no node for 40s while 2 nodes have room", (f"w/g-{i}",))


def test_a_pending_member_of_a_gang_left_short_of_min_count_is_not_stranded() -> None:
    """A gang whose members were deleted below minCount legally waits forever (KEP-4671); a member of a whole gang
    left Pending with room is still stranded, and so is a pod of no gang."""
    group = gang.pod_group("g", "w", 3)
    members = [member(0), member(1), {**member(2), "metadata": {**member(2)["metadata"], "deletionTimestamp": "x"}}]
    plain = {"metadata": {"name": "p", "namespace": "w"}, "spec": {}}
    assert short_gangs(members, [group]) == {"g": "PodGroup g has 2 live members of minCount 3"}
    other = Violation("no-overcommit", "n1 is over", ("w/g-0",))
    kept, excused = excuse_short_gangs([stranded(0), other, Violation("stranded", "p", ("w/p",))],
                                       [*members, plain], [group])
    assert [v.objects for v in kept] == [("w/g-0",), ("w/p",)] and kept[0] is other
    assert excused == [(stranded(0), "PodGroup g has 2 live members of minCount 3")]
    whole = [member(0), member(1), member(2)]
    assert short_gangs(whole, [group]) == {}
    assert excuse_short_gangs([stranded(0)], whole, [group]) == ([stranded(0)], [])
