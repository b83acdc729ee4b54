"""bench/bench_scheduler.py's pinned layout: the proxy on a core of its own, the rest on the others."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import pytest

from tests.support.bench import load_bench

ROOT = Path(__file__).resolve().parents[2]


def bench() -> ModuleType:
    return load_bench("bench_scheduler")


@pytest.mark.parametrize(("available", "proxy", "others"), [
    ({0, 1}, {1}, {0}), ({0, 1, 2, 3}, {3}, {0, 1, 2}), ({2, 5}, {5}, {2})])
def test_the_proxy_gets_the_highest_core_and_the_rest_the_others(available: set[int], proxy: set[int],
                                                                 others: set[int]) -> None:
    assert bench().core_layout(available) == (proxy, others)


def test_one_core_cannot_be_split() -> None:
    with pytest.raises(SystemExit, match="need two cores"):
        bench().core_layout({0})


def test_pin_sets_every_thread_of_a_process() -> None:
    mine = os.sched_getaffinity(0)
    one = {min(mine)}
    b = bench()
    try:
        assert b.pin(os.getpid(), one) == len(os.listdir(f"/proc/{os.getpid()}/task"))
        assert all(os.sched_getaffinity(int(t)) == one for t in os.listdir(f"/proc/{os.getpid()}/task"))
    finally:
        b.pin(os.getpid(), mine)
    assert os.sched_getaffinity(0) == mine


def test_every_arm_says_whether_it_is_pinned() -> None:
    arms = bench().ARMS
    assert {a for a, (_, _, _, pinned) in arms.items() if pinned} == {"direct-pinned", "proxy-pinned"}
    assert arms["proxy-pinned"][:3] == arms["pass-through"][:3] and arms["direct-pinned"][:3] == arms["direct"][:3]
