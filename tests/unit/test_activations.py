"""Activations (proxy.activations): which profile decides, its epoch, its TTL, and the journal of switches."""

from __future__ import annotations

from pathlib import Path

import pytest
from kube_fault_proxy.proxy.activations import Activations, UnknownProfile
from kube_fault_proxy.proxy.journal import Journal
from kube_fault_proxy.proxy.profiles.library import Entry, Library

from tests.support.builders import BIND_MATCH, bind, profile
from tests.support.mitm import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def activations(tmp_path: Path, clock: Clock) -> Activations:
    library = Library({"fail": Entry(profile({"name": "r", "match": BIND_MATCH, "fault": {"abort": {"status": 500}}},
                                             name="fail", seed=7), "test")})
    return Activations(library, Journal(tmp_path / "j.jsonl", wall=lambda: 5.0), clock, lambda: 5.0,
                       scheduler_build="v1.9.0")


def test_an_activation_decides_until_its_ttl_is_up(activations: Activations, clock: Clock) -> None:
    assert activations.decide(bind("a")) is None
    active = activations.activate("fail", ttl_seconds=10)
    assert (active.engine.epoch, active.engine.seed, active.describe(clock.now)["remainingSeconds"]) == (1, 7, 10)
    assert activations.decide(bind("a")) is not None
    clock.now += 10
    assert activations.decide(bind("b")) is None and activations.active is None
    records = activations.journal.since(0)
    assert [(r["event"], r.get("reason")) for r in records] == [("activate", None), ("deactivate", "ttl")]
    assert records[0]["build"] == "v1.9.0"


def test_each_activation_has_the_next_epoch_and_an_unknown_one_changes_nothing(activations: Activations) -> None:
    activations.activate("fail")
    activations.activate("fail")
    with pytest.raises(UnknownProfile):
        activations.activate("nope")
    assert activations.epoch == 2 and activations.active is not None and activations.active.engine.epoch == 2
    assert activations.deactivate() is not None and activations.deactivate() is None


def test_whoever_listens_hears_each_activation_end_with_its_epoch(activations: Activations, clock: Clock) -> None:
    """The watch edits an activation opened end with it: switched off, replaced, or its TTL up."""
    heard: list[int] = []
    activations.on_end.append(heard.append)
    activations.activate("fail")
    activations.activate("fail")  # replaces epoch 1
    activations.deactivate()  # ends epoch 2
    activations.activate("fail", ttl_seconds=1)
    clock.now += 1
    assert activations.decide(bind("a")) is None  # the TTL ended epoch 3
    assert heard == [1, 2, 3] and activations.deactivate() is None and heard == [1, 2, 3]
