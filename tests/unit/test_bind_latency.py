"""Bind latency (proxy.bind_latency): first attempt to commit per pod, its histogram, a run's distribution."""

from __future__ import annotations

from typing import Any

import pytest
from kube_fault_proxy.proxy.bind_latency import BUCKETS, BindLatencies, between, quantile

from tests.support.mitm import Clock

A, B = "/api/v1/namespaces/default/pods/a/binding", "/api/v1/namespaces/default/pods/b/binding"


def latencies(clock: Clock, max_pods: int = 100) -> BindLatencies:
    return BindLatencies(clock, max_pods=max_pods)


# (case, steps: ("attempt", pod) | ("commit", pod) | ("tick", seconds), latencies returned by the commits)
CASES = [
    ("one attempt, one commit", [("attempt", A), ("tick", 0.3), ("commit", A)], [0.3]),
    ("retries keep the first attempt", [("attempt", A), ("tick", 1), ("attempt", A), ("tick", 2), ("commit", A)],
     [3.0]),
    ("a commit without an attempt counts nothing", [("commit", A)], [None]),
    ("a second commit counts nothing", [("attempt", A), ("commit", A), ("commit", A)], [0.0, None]),
    ("pods apart", [("attempt", A), ("tick", 1), ("attempt", B), ("tick", 1), ("commit", B), ("commit", A)],
     [1.0, 2.0]),
    ("a new attempt after a commit starts again", [("attempt", A), ("tick", 5), ("commit", A), ("attempt", A),
                                                     ("tick", 1), ("commit", A)], [5.0, 1.0]),
]


@pytest.mark.parametrize(("steps", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_attempt_to_commit(steps: list[tuple[Any, ...]], expected: list[float | None]) -> None:
    clock = Clock()
    lat = latencies(clock)
    got: list[float | None] = []
    for step in steps:
        match step:
            case ("attempt", pod):
                lat.attempt(pod)
            case ("commit", pod):
                got.append(lat.committed(pod))
            case ("tick", seconds):
                clock.now += seconds
    assert got == pytest.approx(expected)
    counted = [v for v in expected if v is not None]
    assert lat.count == len(counted) and lat.sum == pytest.approx(sum(counted))
    assert lat.max == pytest.approx(max(counted, default=0.0))


def test_a_commit_drops_its_pod_and_the_table_is_capped() -> None:
    clock = Clock()
    lat = latencies(clock, max_pods=3)
    for i in range(5):
        lat.attempt(f"p{i}")
        clock.now += 1
    assert lat.waiting == 3 and lat.evicted == 2
    assert lat.committed("p0") is None and lat.committed("p1") is None, "the oldest went first"
    assert lat.committed("p4") == pytest.approx(1.0) and lat.waiting == 2
    with pytest.raises(ValueError, match="max_pods"):
        BindLatencies(clock, max_pods=0)


@pytest.mark.parametrize(("seconds", "le"), [(0.0, "0.005"), (0.005, "0.005"), (0.0051, "0.01"), (0.7, "1"),
                                             (600.0, "600"), (601.0, "+Inf")])
def test_each_latency_lands_in_the_bucket_whose_bound_it_does_not_pass(seconds: float, le: str) -> None:
    clock = Clock()
    lat = latencies(clock)
    lat.attempt(A)
    clock.now += seconds
    lat.committed(A)
    buckets = dict((b, n) for b, n in lat.as_dict()["buckets"])
    bounds = [f"{b:g}" for b in BUCKETS] + ["+Inf"]
    assert [buckets[b] for b in bounds] == [0] * bounds.index(le) + [1] * (len(bounds) - bounds.index(le))


def test_the_stats_view() -> None:
    clock = Clock()
    lat = latencies(clock)
    lat.attempt(A)
    lat.attempt(B)
    clock.now += 2
    lat.committed(A)
    view = lat.as_dict()
    assert (view["count"], view["sumSeconds"], view["maxSeconds"], view["waiting"], view["evicted"]) == (1, 2, 2, 1, 0)
    assert view["buckets"][-1] == ["+Inf", 1] and len(view["buckets"]) == len(BUCKETS) + 1


@pytest.mark.parametrize(("q", "buckets", "expected"), [
    (0.5, [(1.0, 0), (2.0, 10), (float("inf"), 10)], 1.5),  # the middle of (1, 2]
    (0.9, [(1.0, 0), (2.0, 10), (float("inf"), 10)], 1.9),
    (0.5, [(1.0, 4), (2.0, 4), (4.0, 8), (float("inf"), 8)], 1.0),  # the rank ends a bucket: its bound
    (0.99, [(1.0, 4), (2.0, 4), (4.0, 8), (float("inf"), 8)], 3.96),  # 2 + 2 * (7.92 - 4) / 4
    (0.5, [(0.5, 2), (float("inf"), 2)], 0.25),  # the lowest bucket starts at 0
    (0.99, [(1.0, 1), (float("inf"), 10)], 1.0),  # past the last finite bound: that bound
    (0.5, [(1.0, 0), (float("inf"), 0)], None),
])
def test_quantile_is_interpolated_within_its_bucket(q: float, buckets: list[tuple[float, int]],
                                                    expected: float | None) -> None:
    got = quantile(q, buckets)
    assert got == (None if expected is None else pytest.approx(expected))


def test_a_quantile_out_of_range_is_refused() -> None:
    with pytest.raises(ValueError, match=r"within 0\.\.1"):
        quantile(1.5, [(1.0, 1)])


def reading(clock: Clock, lat: BindLatencies, seconds: list[float]) -> dict[str, Any]:
    for i, s in enumerate(seconds):
        pod = f"{clock.now}-{i}"
        lat.attempt(pod)
        clock.now += s
        lat.committed(pod)
    return lat.as_dict()


def test_a_run_takes_what_committed_between_two_readings() -> None:
    clock = Clock()
    lat = latencies(clock)
    first = reading(clock, lat, [30.0])  # before the run: its 30 s is not the run's
    last = reading(clock, lat, [0.2] * 98 + [3.0, 4.0])
    got = between(first, last)
    assert got["count"] == 100
    assert got["p50Seconds"] == pytest.approx(0.1 + 0.15 * 50 / 98, abs=1e-3)  # within (0.1, 0.25]
    assert 2.5 < got["p99Seconds"] <= 5.0
    assert got["sumSeconds"] == pytest.approx(0.2 * 98 + 7.0)
    assert (got["maxSeconds"], got["maxExact"]) == (5.0, False), "the proxy's max is older: the bucket bound"
    bigger = reading(clock, lat, [40.0])
    assert between(last, bigger)["maxSeconds"] == pytest.approx(40.0) and between(last, bigger)["maxExact"]


def test_a_run_with_no_commits_and_one_from_the_start() -> None:
    clock = Clock()
    lat = latencies(clock)
    empty = lat.as_dict()
    assert between(empty, empty) == {"count": 0, "p50Seconds": None, "p90Seconds": None, "p99Seconds": None,
                                     "maxSeconds": None, "maxExact": True, "sumSeconds": 0.0}
    last = reading(clock, lat, [1.2])
    got = between(None, last)
    assert (got["count"], got["maxSeconds"], got["maxExact"]) == (1, pytest.approx(1.2), True)


def test_readings_with_other_buckets_are_refused() -> None:
    clock = Clock()
    one = BindLatencies(clock).as_dict()
    other = BindLatencies(clock, buckets=(1.0, 2.0)).as_dict()
    with pytest.raises(ValueError, match="different buckets"):
        between(one, other)


def test_a_runs_bind_latency_needs_both_readings() -> None:
    from kube_fault_proxy.rig.runs.runner import run_bind_latency
    clock = Clock()
    lat = latencies(clock)
    first = lat.as_dict()
    last = reading(clock, lat, [0.5, 1.5])
    assert run_bind_latency(None, last) == {} and run_bind_latency(first, None) == {}
    assert run_bind_latency(first, last) == between(first, last) and between(first, last)["count"] == 2


def test_an_estimate_never_passes_the_exact_max() -> None:
    # measured: 300 binds up to 0.348 s put p99 at 0.4375 s by interpolation within (0.25, 0.5]
    clock = Clock()
    lat = latencies(clock)
    first = lat.as_dict()
    last = reading(clock, lat, [0.15] * 97 + [0.3, 0.33, 0.348])
    got = between(first, last)
    assert got["maxExact"] and got["maxSeconds"] == pytest.approx(0.348)
    assert got["p99Seconds"] == pytest.approx(0.348) and got["p50Seconds"] < 0.25
