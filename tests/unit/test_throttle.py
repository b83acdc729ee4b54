"""throttle (proxy.faults.throttle): a 429 in API Priority and Fairness' plain form or as a Status."""

from __future__ import annotations

import json
import random

from kube_fault_proxy.proxy.faults import Throttle
from kube_fault_proxy.proxy.requests.status import APF_429_BODY

from tests.support.builders import bind
from tests.support.plans import reply_of

RNG = random.Random(0)


def test_throttle_apf_form_is_plain_text() -> None:
    status, headers, body = reply_of(Throttle(retryAfterSeconds=4).plan(bind("p"), RNG).before[0])
    assert (status, body) == (429, APF_429_BODY)
    assert headers == {"Retry-After": "4", "Content-Type": "text/plain; charset=utf-8",
                       "X-Content-Type-Options": "nosniff"}


def test_throttle_status_form() -> None:
    status, headers, body = reply_of(Throttle(form="status").plan(bind("p"), RNG).before[0])
    doc = json.loads(body)
    assert (status, headers["Retry-After"], doc["reason"], doc["details"]["retryAfterSeconds"]) == (
        429, "1", "TooManyRequests", 1)
