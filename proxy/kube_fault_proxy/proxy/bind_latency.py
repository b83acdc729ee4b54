"""Bind latency: for each pod, the time from the first Binding POST the proxy saw for it to the commit the proxy
learned of (the apiserver's 2xx answer, or a late commit's), kept as a histogram.

Pure: the mitm addons feed it (`mitm/bind_commits.py`, `mitm/binds.py`, `mitm/late_commits.py`), `/metrics` and
the stats read it, and a run's report takes the difference of two readings (`between`). Its per-pod table holds
only pods whose bind has not committed yet: an entry goes when its bind commits, and the oldest goes when the table
is full (counted as evicted). A quantile read from the buckets is an estimate, interpolated within its bucket as
Prometheus's `histogram_quantile` does; the count, the sum and the largest latency are exact.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# Upper bounds in seconds (1-2.5-5 steps from 5 ms to 10 min); the last bucket, +Inf, is implicit.
BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0,
                              250.0, 600.0)
MAX_PODS = 100_000  # pods waiting for their bind's commit; past this the oldest is dropped
QUANTILES = (0.5, 0.9, 0.99)


class BindLatencies:
    """The first attempt per pod (keyed by its Binding's path), and the histogram of attempt-to-commit times."""

    def __init__(self, clock: Callable[[], float], max_pods: int = MAX_PODS,
                 buckets: Sequence[float] = BUCKETS) -> None:
        if max_pods < 1:
            raise ValueError("max_pods must be at least 1")
        self.clock = clock
        self.max_pods = max_pods
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)  # per bucket, not cumulative; the last is +Inf
        self.count = 0
        self.sum = 0.0
        self.max = 0.0
        self.evicted = 0
        self._first: dict[str, float] = {}

    def attempt(self, pod: str) -> None:
        """A Binding POST for `pod` was read: its first one starts the clock (later ones change nothing)."""
        first = self._first
        first.setdefault(pod, self.clock())  # the one dict operation a Binding pays here
        if len(first) > self.max_pods:
            del first[next(iter(first))]  # the oldest attempt (dicts keep insertion order)
            self.evicted += 1

    def committed(self, pod: str) -> float | None:
        """The bind of `pod` committed: its latency, counted once (None: no attempt of it is waiting)."""
        began = self._first.pop(pod, None)
        if began is None:
            return None
        seconds = max(self.clock() - began, 0.0)
        self.counts[bisect_left(self.buckets, seconds)] += 1
        self.count += 1
        self.sum += seconds
        if seconds > self.max:
            self.max = seconds
        return seconds

    @property
    def waiting(self) -> int:
        """Pods with an attempt and no commit yet."""
        return len(self._first)

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, how many at or below it), +Inf last: the histogram as Prometheus exposes it."""
        out, total = [], 0
        for bound, n in zip((*self.buckets, float("inf")), self.counts, strict=True):
            total += n
            out.append((bound, total))
        return out

    def as_dict(self) -> dict[str, Any]:
        """The stats view: count, sum, max, waiting, evicted and the cumulative buckets ("+Inf" last)."""
        return {"count": self.count, "sumSeconds": round(self.sum, 6), "maxSeconds": round(self.max, 6),
                "waiting": self.waiting, "evicted": self.evicted,
                "buckets": [[_le(bound), n] for bound, n in self.cumulative()]}


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else f"{bound:g}"


def quantile(q: float, buckets: Sequence[tuple[float, int]]) -> float | None:
    """The q-quantile estimated from cumulative (upper bound, count) buckets, linear within its bucket (the
    lowest bucket starts at 0); None when they hold nothing. In the +Inf bucket: the highest finite bound."""
    if not 0 <= q <= 1:
        raise ValueError(f"quantile {q} is not within 0..1")
    total = buckets[-1][1] if buckets else 0
    if total == 0:
        return None
    rank = q * total
    lower_bound, lower_count = 0.0, 0
    for bound, n in buckets:
        if n >= rank and n > lower_count:
            if bound == float("inf"):
                return lower_bound
            return lower_bound + (bound - lower_bound) * (rank - lower_count) / (n - lower_count)
        lower_bound, lower_count = bound, n
    return lower_bound


def _parsed(view: Mapping[str, Any]) -> list[tuple[float, int]]:
    return [(float("inf") if le == "+Inf" else float(le), int(n)) for le, n in view["buckets"]]


def between(first: Mapping[str, Any] | None, last: Mapping[str, Any]) -> dict[str, Any]:
    """The distribution of the binds that committed between two stats readings (`as_dict`; `first` None: since
    the proxy started): count, p50, p90, p99 (estimates from the buckets, never above an exact max), max, and
    whether max is exact (the largest latency was set between the readings) or the upper bound of the highest
    bucket reached."""
    end = _parsed(last)
    start = _parsed(first) if first is not None else [(b, 0) for b, _ in end]
    if [b for b, _ in start] != [b for b, _ in end]:
        raise ValueError("the two readings have different buckets")
    diff = [(b, n - m) for (b, n), (_, m) in zip(end, start, strict=True)]
    count = diff[-1][1]
    out: dict[str, Any] = {"count": count}
    for q in QUANTILES:
        value = quantile(q, diff)
        out[f"p{round(q * 100):d}Seconds"] = None if value is None else round(value, 4)
    if count == 0:
        out.update(maxSeconds=None, maxExact=True)
    elif first is None or float(last["maxSeconds"]) > float(first["maxSeconds"]):
        out.update(maxSeconds=float(last["maxSeconds"]), maxExact=True)
    else:  # the largest of these is no larger than the proxy's own, set before the first reading
        per_bucket = [(b, n - below) for (b, n), below in zip(diff, [0] + [n for _, n in diff], strict=False)]
        top = max(b for b, n in per_bucket if n > 0)
        out.update(maxSeconds=min(top, float(last["maxSeconds"])), maxExact=False)
    if out["maxExact"] and out["maxSeconds"] is not None:  # an estimate past the largest there was is no estimate
        for q in QUANTILES:
            key = f"p{round(q * 100):d}Seconds"
            out[key] = min(out[key], round(out["maxSeconds"], 4))
    out["sumSeconds"] = round(float(last["sumSeconds"]) - float(first["sumSeconds"] if first else 0.0), 6)
    return out
