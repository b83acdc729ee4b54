"""Binding outcomes (proxy.mitm.binds): each Binding counted once, by the first answer its client got."""

from __future__ import annotations

import gc

import pytest
from kube_fault_proxy.proxy.mitm.binds import BindOutcomes


class Flow:
    """Stands in for the flow that owns a Binding (held weakly)."""


# (case, steps: ("read", id) | ("end", id, status[, retry-after]) | ("outage",), the outcomes counted
# as (status, retry-after), left in flight)
CASES = [
    ("answered", [("read", "a"), ("end", "a", 201)], [(201, None)], 0),
    ("failed", [("read", "a"), ("end", "a", 409)], [(409, None)], 0),
    ("throttled: the Retry-After goes with it", [("read", "a"), ("end", "a", 429, "1")], [(429, "1")], 0),
    ("no answer", [("read", "a"), ("end", "a", None)], [(None, None)], 0),
    ("ended twice: the first end counts", [("read", "a"), ("end", "a", 201), ("end", "a", None)], [(201, None)], 0),
    ("never read", [("end", "a", 201)], [], 0),
    ("still in flight", [("read", "a"), ("read", "b"), ("end", "b", 201)], [(201, None)], 1),
    ("an outage fails the ones in flight", [("read", "a"), ("read", "b"), ("end", "a", 201), ("outage",)],
     [(201, None), (None, None)], 0),
    ("their late answers count nothing", [("read", "a"), ("outage",), ("end", "a", 201)], [(None, None)], 0),
    ("an outage with none in flight", [("outage",)], [], 0),
]


@pytest.mark.parametrize(("steps", "counted", "left"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_outcomes(steps: list[tuple[object, ...]], counted: list[tuple[int | None, str | None]], left: int) -> None:
    outcomes: list[tuple[int | None, str | None]] = []
    binds = BindOutcomes(lambda status, retry_after: outcomes.append((status, retry_after)))
    owners = {}
    for step in steps:
        match step:
            case ("read", str(rid)):
                owners[rid] = Flow()
                binds.read(rid, owners[rid])
            case ("end", str(rid), status):
                binds.ended(rid, status)  # type: ignore[arg-type]
            case ("end", str(rid), status, str(retry_after)):
                binds.ended(rid, status, retry_after)  # type: ignore[arg-type]
            case ("outage",):
                binds.fail_in_flight()
    assert outcomes == counted
    assert len(binds) == left


def test_an_outage_says_how_many_it_failed() -> None:
    binds = BindOutcomes(lambda status, retry_after: None)
    owners = [Flow() for _ in range(3)]
    for i, owner in enumerate(owners):
        binds.read(str(i), owner)
    assert binds.fail_in_flight() == 3 and binds.fail_in_flight() == 0


def test_a_binding_whose_flow_is_gone_is_no_longer_in_flight() -> None:
    outcomes: list[tuple[int | None, str | None]] = []
    binds = BindOutcomes(lambda status, retry_after: outcomes.append((status, retry_after)))
    owner = Flow()
    binds.read("a", owner)
    del owner
    gc.collect()
    assert len(binds) == 0 and binds.fail_in_flight() == 0 and outcomes == []
