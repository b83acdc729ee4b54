"""stallConnection (proxy.faults.stall_connection): its settings and its plan."""

from __future__ import annotations

import random

import pytest
from kube_fault_proxy.proxy.faults import Fault
from kube_fault_proxy.proxy.faults.base import Draw
from kube_fault_proxy.proxy.faults.plan import StallClient
from kube_fault_proxy.proxy.faults.stall_connection import StallConnection
from pydantic import ValidationError

from tests.support.builders import bind


@pytest.mark.parametrize(("settings", "error"), [
    ({}, "Field required"),
    ({"for": "0s"}, "longer than 0s"),
    ({"for": "2h"}, "at most 3600s"),
    ({"for": 60}, "a duration needs a unit"),
    ({"for": "1m", "seconds": 3}, "Extra inputs are not permitted"),
])
def test_bad_settings_are_refused(settings: dict[str, object], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        Fault.model_validate({"stallConnection": settings})


def test_the_request_is_forwarded_and_its_connection_stalls() -> None:
    plan = StallConnection.model_validate({"for": "1m30s"}).plan(bind("p"), random.Random(0))
    assert plan.before == (StallClient(90.0),) and plan.forwards
    assert plan.describe() == "stall the client's connection for 90s, then forward"


def test_it_acts_on_any_request_and_is_searched_only_when_named() -> None:
    assert StallConnection.traits.acts_on == "any" and not StallConnection.searched_by_default
    rng = random.Random(1)
    for _ in range(10):
        StallConnection.model_validate(StallConnection.draw(rng, Draw()))
