"""reset (proxy.faults.reset): the request's stream reset."""

from __future__ import annotations

import random

from kube_fault_proxy.proxy.faults import Reset
from kube_fault_proxy.proxy.faults.plan import ResetStream

from tests.support.builders import bind

RNG = random.Random(0)


def test_reset() -> None:
    assert Reset().plan(bind("p"), RNG).before == (ResetStream(),)
