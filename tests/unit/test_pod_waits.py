"""`no-pod-waits-past-bound` on recorded histories and on pods as they are: each late or missing bind caught, a legal
history clean."""

from __future__ import annotations

import datetime
import itertools
from typing import Any

from kube_fault_proxy.rig.invariants.history import Change, History
from kube_fault_proxy.rig.invariants.pod_waits import DEFAULT_BOUND, check_waits, judge_waits, waits_from_pods

Obj = dict[str, Any]
T0 = 1_800_000_000.0  # the faults end here in every history below


def stamp(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Pods:
    """A history of pods written by hand: each change the next resourceVersion, at the time given."""

    def __init__(self) -> None:
        self.changes: list[Change] = []
        self.rv = itertools.count(100)

    def at(self, t: float, name: str, node: str | None = None, type_: str = "MODIFIED", created: float = T0 - 5,
           scheduler: str = "default-scheduler", unschedulable: bool = False) -> None:
        conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}] if unschedulable else []
        obj = {"metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "resourceVersion": str(next(self.rv)),
                            "creationTimestamp": stamp(created)},
               "spec": {"schedulerName": scheduler, **({"nodeName": node} if node else {})},
               "status": {"phase": "Running" if node else "Pending", "conditions": conditions}}
        self.changes.append(Change(t, "Pod", type_, obj))

    def history(self, end: float) -> History:
        return History(self.changes, T0 - 10, end)


def legal() -> Pods:
    """Pods bound during the faults, soon after, and one created late and bound at once; one deleted unbound."""
    h = Pods()
    h.at(T0 - 5, "early", type_="ADDED")
    h.at(T0 - 2, "early", "n1")
    h.at(T0 - 5, "retried", type_="ADDED")
    h.at(T0 + 25, "retried", "n2")  # its backoff and the unschedulable flush: inside the bound
    h.at(T0 + 50, "late-made", type_="ADDED", created=T0 + 50)
    h.at(T0 + 51, "late-made", "n1", created=T0 + 50)
    h.at(T0 - 5, "dropped", type_="ADDED")
    h.at(T0 + 10, "dropped", type_="DELETED")
    h.at(T0 - 5, "too-big", type_="ADDED")
    h.at(T0 + 1, "too-big", unschedulable=True)  # no room: stranded's business, not this one's
    h.at(T0 - 5, "other", type_="ADDED", scheduler="yunikorn")  # another scheduler's, never bound
    return h


def test_a_legal_history_is_clean() -> None:
    assert check_waits(legal().history(T0 + 120), {"default-scheduler"}, T0) == []


def test_a_late_bind_and_a_pod_still_unbound_are_caught_with_their_numbers() -> None:
    h = legal()
    h.at(T0 - 5, "delayed", type_="ADDED")
    h.at(T0 + 47.5, "delayed", "n3")  # kubernetes#135900: Bind waited behind the status patches
    h.at(T0 - 5, "forgotten", type_="ADDED")
    h.at(T0 + 90, "unbound-made", type_="ADDED", created=T0 + 90)
    found = check_waits(h.history(T0 + 135), {"default-scheduler"}, T0)
    assert [v.message for v in found] == [
        "ns/delayed was bound to n3 47.5s after the faults ended (bound 40s)",
        "ns/forgotten is still unbound 135.0s after the faults ended (bound 40s)",
        "ns/unbound-made is still unbound 45.0s after it was created (bound 40s)"]
    assert [(v.invariant, v.objects, v.kind, v.node) for v in found][:2] == [
        ("no-pod-waits-past-bound", ("ns/delayed",), "late", "n3"),
        ("no-pod-waits-past-bound", ("ns/forgotten",), "unbound", "")]
    assert found[0].numbers == {"waited": 47.5, "bound": DEFAULT_BOUND}
    assert check_waits(h.history(T0 + 135), {"default-scheduler"}, T0, bound=150) == []
    assert check_waits(h.history(T0 + 135), {"yunikorn"}, T0) != []  # "other" waited 135 s too


def test_a_pod_deleted_unbound_after_the_bound_is_caught() -> None:
    h = Pods()
    h.at(T0 - 5, "gave-up", type_="ADDED")
    h.at(T0 + 60, "gave-up", type_="DELETED")
    assert [v.message for v in check_waits(h.history(T0 + 70), {"default-scheduler"}, T0)] == [
        "ns/gave-up was deleted unbound 60.0s after the faults ended (bound 40s)"]


def test_pods_as_they_are_count_the_bind_from_their_podscheduled_condition() -> None:
    def pod(name: str, created: float, bound: float | None) -> Obj:
        cond = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp(bound)}] if bound else []
        return {"metadata": {"name": name, "namespace": "ns", "creationTimestamp": stamp(created)},
                "spec": {"schedulerName": "default-scheduler", **({"nodeName": "n1"} if bound else {})},
                "status": {"conditions": cond}}

    pods = [pod("quick", T0 - 5, T0 + 3), pod("slow", T0 - 5, T0 + 55), pod("waiting", T0 + 2, None)]
    found = judge_waits(waits_from_pods(pods), {"default-scheduler"}, T0, now=T0 + 45)
    assert [v.message for v in found] == ["ns/slow was bound to n1 55.0s after the faults ended (bound 40s)",
                                          "ns/waiting is still unbound 43.0s after it was created (bound 40s)"]
