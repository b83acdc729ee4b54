"""hang (proxy.faults.hang): a wait until the client gives up, then a timeout answer or a reset."""

from __future__ import annotations

import json
import random

from kube_fault_proxy.proxy.faults import Hang
from kube_fault_proxy.proxy.faults.plan import ResetStream, Wait
from kube_fault_proxy.proxy.requests.status import TIMEOUT_MESSAGE

from tests.support.builders import bind
from tests.support.plans import reply_of

RNG = random.Random(0)


def test_hang_then_timeout_or_reset() -> None:
    wait, end = Hang(seconds=3).plan(bind("p"), RNG).before
    assert wait == Wait(3, until_client_gone=True)
    status, _, body = reply_of(end)
    assert status == 504 and json.loads(body)["message"] == TIMEOUT_MESSAGE
    assert Hang(then="reset").plan(bind("p"), RNG).before == (Wait(3600.0, True), ResetStream())
