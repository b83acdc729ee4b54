"""delay (proxy.faults.delay): a wait before the request or before its answer, with bounded jitter."""

from __future__ import annotations

import random

from kube_fault_proxy.proxy.faults import Delay
from kube_fault_proxy.proxy.faults.plan import Wait

from tests.support.builders import bind

RNG = random.Random(0)


def test_delay_request_and_response_phase() -> None:
    assert Delay(seconds=1.5).plan(bind("p"), RNG).before == (Wait(1.5),)
    resp = Delay(seconds=1.5, phase="response").plan(bind("p"), RNG)
    assert resp.before == () and resp.after == (Wait(1.5),) and resp.forwards
    assert not resp.after_only_if_committed  # a slow answer is slow whatever it says


def test_delay_jitter_stays_in_bounds() -> None:
    rng = random.Random(1)
    waits = [Delay(seconds=1, jitterSeconds=0.5).plan(bind("p"), rng).before[0] for _ in range(500)]
    seconds = [w.seconds for w in waits if isinstance(w, Wait)]
    assert 0.5 <= min(seconds) < 0.6 and 1.4 < max(seconds) <= 1.5
    assert all(s >= 0 for s in (Delay(seconds=0.1, jitterSeconds=5).plan(bind("p"), rng).before[0].seconds  # type: ignore[union-attr]
                                for _ in range(50)))
