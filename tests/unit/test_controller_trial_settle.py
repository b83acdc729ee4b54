"""A kube-controller-manager trial's last settle: its end state is read once the workloads converged and then
nothing changed for the tier's quiet time. Read at convergence alone, a StatefulSet's status could still lag its
pods (a pod watch edited by `delayEvents` stays edited after the profile is off): in the first StatefulSet
Recreate search on v1.38.0-beta.0 (2026-12-06), nine `diverged` hits were that (status 0 of 6 at convergence,
6 of 6 ten seconds later)."""

from __future__ import annotations

import time

import pytest
from kube_fault_proxy.rig.search import controller_trial
from kube_fault_proxy.rig.search.controller_trial import ControllerTrial

QUIET = 0.3


class Lagging(ControllerTrial):
    """Converged from the start; its signature (the objects' revisions) changes `changes` times, every 0.1 s,
    as a status catching up does."""

    def __init__(self, changes: int) -> None:  # no rig: only settle's inputs
        self.started, self.changes = time.monotonic(), changes

    def converged(self) -> bool:
        return True

    def signature(self) -> tuple[int, ...]:
        return (min(self.changes, int((time.monotonic() - self.started) / 0.1)),)


@pytest.fixture(autouse=True)
def fast_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(controller_trial, "POLL", 0.02)


def test_converged_alone_ends_the_settle_at_once_while_the_status_still_changes() -> None:
    t = Lagging(changes=5)
    assert t.settle(QUIET, 5.0) and t.signature() == (0,)


def test_the_last_settle_waits_for_the_changes_to_stop_then_the_quiet_time() -> None:
    t = Lagging(changes=5)
    assert t.settle(QUIET, 5.0, converged_and_quiet=True)
    waited = time.monotonic() - t.started
    assert t.signature() == (5,) and waited >= 0.5 + QUIET - 0.05


def test_changes_that_never_stop_end_the_last_settle_at_its_timeout_unsettled() -> None:
    t = Lagging(changes=10**6)
    t0 = time.monotonic()
    assert not t.settle(QUIET, 0.8, converged_and_quiet=True) and time.monotonic() - t0 >= 0.8


def test_the_last_settles_quiet_outlasts_the_longest_event_an_edited_watch_keeps_back() -> None:
    """t16 of that search: `delayEvents` of 5 s on the pod watch, an outage and a hang on pod creates."""
    from kube_fault_proxy.rig.search.genome import Genome
    from kube_fault_proxy.rig.search.kinds import event_lag
    pods = {"resources": ["pods"], "verbs": ["watch"]}
    rules = ({"name": "r1", "match": {"resources": ["pods"], "verbs": ["create"]}, "fault": {"outage": {"seconds": 1}}},
             {"name": "r2", "match": pods, "fault": {"delayEvents": {"seconds": 5, "jitterSeconds": 0.5}}})
    assert event_lag(Genome(rules=rules).rules) == 5.5  # the outage's second is not an event kept back
    assert event_lag(Genome(rules=rules[:1]).rules) == 0.0
    held = {"name": "r3", "match": pods, "fault": {"holdEvents": {"maxSeconds": 8}}}
    assert event_lag(Genome(rules=(*rules, held)).rules) >= 8
    window = {"name": "r4", "match": pods, "fault": {"coalesceEvents": {"windowSeconds": 3}}}
    dropped = {"name": "r5", "match": pods, "fault": {"dropEvents": {}}}  # nothing kept back: dropped
    assert event_lag(Genome(rules=(window, dropped)).rules) == 3.0
