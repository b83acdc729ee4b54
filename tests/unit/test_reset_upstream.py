"""resetUpstream (proxy.faults.reset_upstream): the connection to the apiserver closed under the request."""

from __future__ import annotations

import random

from kube_fault_proxy.proxy.faults import ResetUpstream
from kube_fault_proxy.proxy.faults.plan import CloseUpstream

from tests.support.builders import bind

RNG = random.Random(0)


def test_reset_upstream_plans_closing_the_upstream_connection() -> None:
    assert ResetUpstream().plan(bind("p"), RNG).before == (CloseUpstream(),)
