"""A search trial's settle after a crash point: every pod bound counts only once the restarted scheduler has had
the tier's quiet time (a YuniKorn judged the moment its REST API answered again had recovered none of the pods,
and its queue booked 0 of 100: I1 broken by the rig, not the scheduler)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

from kube_fault_proxy.rig.search.genome import Genome
from kube_fault_proxy.rig.search.trial import Tier, TrialSnapshot, _Trial

QUIET = 0.4


def trial(crashes: Any) -> _Trial:
    t = _Trial(SimpleNamespace(trials=0, scheduler="yunikorn"), Genome(rules=()), "t0",  # type: ignore[arg-type]
               Tier("test", QUIET, 5.0), control=None, api=None)  # type: ignore[arg-type]
    t.crashes = crashes
    t.wall0 = time.time()
    snap = TrialSnapshot([], [], time.time(), None)
    t.take = lambda: snap  # type: ignore[method-assign]
    return t


def test_without_a_crash_point_every_pod_bound_ends_the_settle_at_once() -> None:
    t = trial(None)
    t0 = time.monotonic()
    _, settled = t.settle(lambda snap: True)
    assert settled and time.monotonic() - t0 < QUIET / 2 and not t.settling()


def test_after_a_restart_every_pod_bound_waits_the_quiet_time() -> None:
    t = trial(SimpleNamespace(busy=threading.Lock()))
    t.result.events.append({"event": "scheduler-restarted", "t": round(time.time() - t.wall0, 2)})
    assert t.settling()
    t0 = time.monotonic()
    _, settled = t.settle(lambda snap: True)
    assert settled and time.monotonic() - t0 >= QUIET - 0.05
    assert not t.settling()


def test_while_the_scheduler_is_down_or_starting_it_is_settling() -> None:
    crashes = SimpleNamespace(busy=threading.Lock())
    t = trial(crashes)
    assert not t.settling()  # a crash-point watch with no crash point yet
    with crashes.busy:
        assert t.settling()
    t.result.events.append({"event": "scheduler-restarted", "t": -2 * QUIET})  # long enough ago
    assert not t.settling()


def test_quiet_lasts_past_the_longest_event_an_edited_watch_keeps_back() -> None:
    """A `delayEvents` rule's watch stays edited after the profile is off: a settle that is not done waits for
    nothing to change for 1 s past the delay, not the tier's quiet alone (a pod whose event is still held would
    be judged stranded)."""
    t = trial(None)
    delay = {"name": "r1", "match": {"resources": ["pods"], "verbs": ["watch"]},
             "fault": {"delayEvents": {"seconds": 1.0}}}
    t.genome = Genome(rules=(delay,))  # type: ignore[misc]
    t0 = time.monotonic()
    _, settled = t.settle(lambda snap: False)
    assert settled and time.monotonic() - t0 >= 2.0 - 0.05
    plain = trial(None)
    t0 = time.monotonic()
    _, settled = plain.settle(lambda snap: False)
    assert settled and time.monotonic() - t0 < 1.6  # the tier's 0.4 s, checked every half second
