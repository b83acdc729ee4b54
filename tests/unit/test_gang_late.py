"""gang-late: the gang shape whose last node comes once the trial's load is in. The node is deleted before the
scheduler starts again and created again, as it was, LATE_AFTER seconds after the last pod, while the faults act;
a trial that ends before that creates it again at its clean-up, or says why it could not."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
from kube_fault_proxy.kube.kubeapi import ApiError
from kube_fault_proxy.rig.search import trial as trial_module
from kube_fault_proxy.rig.search.genome import Genome
from kube_fault_proxy.rig.search.trial import Tier, _Trial
from kube_fault_proxy.rig.workloads.shapes import GANG_SHAPES, generate


@pytest.mark.parametrize(("nodes", "pods", "seed"), [(5, 40, 1), (3, 9, 7), (2, 2, 3)])
def test_gang_late_is_gang_with_its_last_node_late(nodes: int, pods: int, seed: int) -> None:
    late, gang = generate("gang-late", nodes, pods, seed), generate("gang", nodes, pods, seed)
    assert "gang-late" in GANG_SHAPES and late.shape == "gang-late" and late.late_nodes == 1 and gang.late_nodes == 0
    # the same nodes, pods, placement and PodGroups: only when the last node comes differs
    assert (late.nodes, late.pods, late.placement, late.gangs) == (gang.nodes, gang.pods, gang.placement, gang.gangs)
    assert any(n == nodes - 1 for n in late.placement)  # members are planned on the late node: they must wait


def test_a_single_node_is_never_late() -> None:
    assert generate("gang-late", 1, 4, 1).late_nodes == 0


class FakeLate:
    def __init__(self, fail: bool = False) -> None:
        self.gone, self.fail, self.closed, self.came_at = ["kwok-node-4"], fail, False, 0.0

    def restore_all(self) -> list[str]:
        if self.fail:
            raise ApiError(response=SimpleNamespace(json=lambda: {"code": 500, "message": "boom"},  # type: ignore[arg-type]
                                                    status_code=500))
        self.came_at, names, self.gone = time.monotonic(), self.gone, []
        return [f"created node {n} again" for n in names]

    def close(self) -> None:
        self.closed = True


class FakeControl:
    def deactivate(self) -> None:
        pass

    def delete_profile(self, name: str) -> None:
        pass


def trial(late: Any) -> _Trial:
    t = _Trial(SimpleNamespace(trials=0, scheduler="kube-scheduler"), Genome(rules=(), shape="gang-late"),  # type: ignore[arg-type]
               "t0", Tier("test", 0.4, 5.0), control=FakeControl(), api=None)  # type: ignore[arg-type]
    t.late = late
    return t


def test_the_late_node_comes_after_the_load_and_its_coming_is_a_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trial_module, "LATE_AFTER", 0.2)
    late = FakeLate()
    t = trial(late)
    t0 = time.monotonic()
    t.nodes_come()
    assert late.came_at - t0 >= 0.2 and late.gone == []
    assert [s["did"] for s in t.result.steps] == ["late: created node kwok-node-4 again"]
    t.nodes_come()  # nothing left to come: nothing done twice
    assert len(t.result.steps) == 1


def test_without_late_nodes_nothing_waits() -> None:
    t = trial(None)
    t0 = time.monotonic()
    t.nodes_come()
    assert time.monotonic() - t0 < 0.1 and t.result.steps == []


def test_a_trial_ended_before_its_node_came_creates_it_at_clean_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trial_module.load, "clean", lambda api, namespace: None)
    late = FakeLate()
    t = trial(late)
    t.clean()
    assert late.gone == [] and late.closed and [s["did"] for s in t.result.steps] == [
        "undone: created node kwok-node-4 again"]
    failing = FakeLate(fail=True)
    t = trial(failing)
    t.clean()
    assert failing.closed and (t.result.error or "").startswith("creating the late nodes again: ApiError")
