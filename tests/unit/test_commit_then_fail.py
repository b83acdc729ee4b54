"""commitThenFail (proxy.faults.commit_then_fail): the write forwarded, then its answer replaced."""

from __future__ import annotations

import random

from kube_fault_proxy.proxy.faults import Abort, CommitThenFail, Reset
from kube_fault_proxy.proxy.faults.plan import ResetStream

from tests.support.builders import bind
from tests.support.plans import reply_of

RNG = random.Random(0)


def test_commit_then_fail_acts_after_upstream() -> None:
    plan = CommitThenFail(abort=Abort(status=500)).plan(bind("p"), RNG)
    assert plan.before == () and plan.forwards and plan.after_only_if_committed
    assert reply_of(plan.after[0])[0] == 500
    assert CommitThenFail(reset=Reset()).plan(bind("p"), RNG).after == (ResetStream(),)
    assert plan.describe() == "forward, then respond 500"
