"""What the proxy counted: requests, injections, events and Binding outcomes, their journal records,
and the stats view with its reset baselines."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from kube_fault_proxy.proxy.bind_latency import BindLatencies
from kube_fault_proxy.proxy.connections import ConnectionCounts
from kube_fault_proxy.proxy.engine import Decision, Engine
from kube_fault_proxy.proxy.journal import Journal
from kube_fault_proxy.proxy.requests.identity import RequestIdentity

# A Retry-After client-go obeys (strconv.Atoi in rest.retryAfterSeconds): an HTTP date is not one.
RETRY_AFTER = re.compile(r"[+-]?[0-9]+")


class Counters:
    """Plain integers bumped on the request path; stats() and the /metrics families read them."""

    def __init__(self, journal: Journal, clock: Callable[[], float] = time.monotonic) -> None:
        self.journal = journal
        self.requests = 0
        self.injections: Counter[tuple[str, str, str]] = Counter()
        self.by_fault: Counter[str] = Counter()
        self.events: Counter[str] = Counter()
        self.requests_by: Counter[tuple[str, str, bool]] = Counter()
        # Binding POST outcomes as the client saw them (never reset: samplers diff them)
        self.binds_succeeded = 0
        self.binds_throttled = 0
        self.binds_failed = 0
        # Each pod's first Binding POST to its commit (never reset: a run diffs two readings).
        self.bind_latency = BindLatencies(clock)
        # Never reset: what /metrics exports as Prometheus counters.
        self.injections_total: Counter[tuple[str, str, str]] = Counter()
        self.events_total: Counter[str] = Counter()
        # Fed by the proxy's connection hooks; never reset (samplers diff them).
        self.connections = ConnectionCounts()
        self._baseline: dict[tuple[int, str], dict[str, int]] = {}
        self._requests_baseline = 0
        self._unparsable_seen: set[str] = set()  # kinds already journaled (a bounded set of reasons)

    def request(self, ident: RequestIdentity) -> None:
        """Count one request, before it is decided."""
        self.requests += 1
        if ident.unparsable is not None:
            self._unparsable(ident, ident.unparsable)
        if ident.is_resource:
            self.requests_by[(ident.verb, ident.resource, ident.initial_events)] += 1  # formatted in stats()

    def performed(self, decision: Decision, ident: RequestIdentity, **outcome: Any) -> None:
        """Count and journal an injection once it has been carried out."""
        key = (decision.profile, decision.rule, decision.fault)
        self.injections[key] += 1
        self.injections_total[key] += 1
        self.by_fault[decision.fault] += 1
        self.journal.append("inject", **decision.stamp(), request=ident.as_dict(), **outcome)

    def bind_outcome(self, status: int | None, retry_after: str | None = None) -> None:
        """Count one Binding POST by what its client got: a 2xx (succeeded); a 429 whose Retry-After
        is whole seconds (throttled: client-go waits and sends it again itself); any other status, or
        no answer (failed)."""
        if status is not None and 200 <= status < 300:
            self.binds_succeeded += 1
        elif status == 429 and retry_after is not None and RETRY_AFTER.fullmatch(retry_after):
            self.binds_throttled += 1
        else:
            self.binds_failed += 1

    def _unparsable(self, ident: RequestIdentity, kind: str) -> None:
        """Count a request part the proxy could not read (it is decided as if absent); journal each kind once."""
        self.events["request-unparsable"] += 1
        self.events_total["request-unparsable"] += 1
        if kind not in self._unparsable_seen:
            self._unparsable_seen.add(kind)
            self.journal.append("request-unparsable", kind=kind, request=ident.as_dict())

    def note(self, event: str, **fields: Any) -> None:
        """Count and journal a proxy event that is not an injection (e.g. an upstream loss)."""
        self.events[event] += 1
        self.events_total[event] += 1
        self.journal.append(event, **fields)

    def stats(self, engine: Engine | None) -> dict[str, Any]:
        """Requests, per-rule counters of the active engine, injections per rule and kind."""
        rules: dict[str, dict[str, int]] = {}
        active = None
        if engine is not None:
            active = {"profile": engine.profile.name, "epoch": engine.epoch}
            for rule, counts in engine.counters().items():
                base = self._baseline.get((engine.epoch, rule), {})
                rules[rule] = {k: v - base.get(k, 0) for k, v in counts.items()}
        return {
            "requests": self.requests - self._requests_baseline,
            "requestsByResource": dict(sorted(
                (f"{verb} {resource}" + (" (sendInitialEvents)" if initial else ""), n)
                for (verb, resource, initial), n in self.requests_by.items())),
            "active": active,
            "rules": rules,
            "injections": [
                {"profile": p, "rule": r, "fault": f, "count": n}
                for (p, r, f), n in sorted(self.injections.items())
            ],
            "injectionsByFault": dict(sorted(self.by_fault.items())),
            "injectionsTotal": sum(self.by_fault.values()),
            "events": dict(sorted(self.events.items())),
            "bindsTotal": {"succeeded": self.binds_succeeded, "throttled": self.binds_throttled,
                           "failed": self.binds_failed},
            "bindLatency": self.bind_latency.as_dict(),
            "connections": self.connections.as_dict(),
        }

    def reset(self, engine: Engine | None) -> None:
        """Zero what stats shows; the engine's own state (maxInjections…) is kept, its counters become the baseline."""
        self._requests_baseline = self.requests
        self.requests_by.clear()
        self.injections.clear()
        self.by_fault.clear()
        self.events.clear()
        if engine is not None:
            self._baseline = {(engine.epoch, r): c for r, c in engine.counters().items()}
