"""Prometheus metrics: the runtime's counters, read only when /metrics is scraped, and the process's own."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from kube_fault_proxy.proxy.runtime import Runtime

# One function per metric family, called at scrape time only: the per-request path (Runtime.decide,
# performed, note, …) and the connection hooks keep counting in plain integers and never see
# Prometheus. A new family is one more function here and one more entry in FAMILIES; a new
# connection counter is one more row in CONNECTIONS.
Family = Callable[[Runtime], Metric]


def requests(rt: Runtime) -> Metric:
    """kfp_requests_total."""
    return CounterMetricFamily("kfp_requests", "Requests seen by the proxy.", value=rt.counters.requests)


def injections(rt: Runtime) -> Metric:
    """kfp_injections_total{profile,rule,fault}."""
    m = CounterMetricFamily("kfp_injections", "Faults injected, by profile, rule and fault kind.",
                            labels=("profile", "rule", "fault"))
    for key, n in sorted(rt.counters.injections_total.items()):
        m.add_metric(key, n)
    return m


def events(rt: Runtime) -> Metric:
    """kfp_events_total{event}."""
    m = CounterMetricFamily("kfp_events", "Proxy events that are not injections (e.g. upstream-lost).",
                            labels=("event",))
    for event, n in sorted(rt.counters.events_total.items()):
        m.add_metric((event,), n)
    return m


def binds(rt: Runtime) -> Metric:
    """kfp_binds_total{outcome}: every outcome has a sample from the start, so rate() sees its first one."""
    m = CounterMetricFamily("kfp_binds", "Binding POSTs by what their client got: succeeded (2xx), throttled "
                            "(429 with Retry-After, which client-go retries itself), failed (any other answer, "
                            "or none).", labels=("outcome",))
    for outcome, n in (("succeeded", rt.counters.binds_succeeded), ("throttled", rt.counters.binds_throttled),
                       ("failed", rt.counters.binds_failed)):
        m.add_metric((outcome,), n)
    return m


def bind_latency(rt: Runtime) -> Metric:
    """kfp_bind_latency_seconds: each pod's first Binding POST to its commit, as a histogram."""
    lat = rt.counters.bind_latency
    return HistogramMetricFamily(
        "kfp_bind_latency_seconds", "Seconds from a pod's first Binding POST the proxy saw to the commit it learned of "
        "(the apiserver's 2xx answer, or a late commit's).",
        buckets=[("+Inf" if bound == float("inf") else repr(bound), n) for bound, n in lat.cumulative()],
        sum_value=lat.sum)


def binds_waiting(rt: Runtime) -> Metric:
    """kfp_bind_latency_waiting_pods."""
    return GaugeMetricFamily("kfp_bind_latency_waiting_pods", "Pods with a Binding POST seen and no commit yet.",
                             value=rt.counters.bind_latency.waiting)


def binds_evicted(rt: Runtime) -> Metric:
    """kfp_bind_latency_evicted_total."""
    return CounterMetricFamily("kfp_bind_latency_evicted", "Pods dropped from the bind latency table before their "
                               "commit (the table is full).", value=rt.counters.bind_latency.evicted)


def activation_epoch(rt: Runtime) -> Metric:
    """kfp_activation_epoch."""
    return GaugeMetricFamily("kfp_activation_epoch", "Activation epoch (increments on every activation).",
                             value=rt.activations.epoch)


def active_profile(rt: Runtime) -> Metric:
    """kfp_active_profile{profile}: one sample, 1, while a profile is active."""
    m = GaugeMetricFamily("kfp_active_profile", "1 for the active profile.", labels=("profile",))
    if rt.activations.active is not None:
        m.add_metric((rt.activations.active.engine.profile.name,), 1)
    return m


def journal_records(rt: Runtime) -> Metric:
    """kfp_journal_records_total."""
    return CounterMetricFamily("kfp_journal_records", "Records written to the journal.", value=rt.journal.seq)


# (family, type, help, the ConnectionCounts attribute it reads)
CONNECTIONS = (
    ("kfp_client_connections_accepted", "counter", "Client connections the proxy accepted.", "client_accepted"),
    ("kfp_client_connections_open", "gauge", "Client connections open now.", "client_open"),
    ("kfp_upstream_connections_opened", "counter", "Upstream (apiserver) connections the proxy opened.",
     "upstream_opened"),
    ("kfp_upstream_connections_open", "gauge", "Upstream connections open now.", "upstream_open"),
    ("kfp_upstream_connect_failures", "counter", "Upstream connects that failed.", "upstream_failed"),
)


def connection_family(name: str, kind: str, help_text: str, attribute: str) -> Family:
    """kfp_*_connections_*: one of the runtime's connection counters."""
    def family(rt: Runtime) -> Metric:
        value = getattr(rt.counters.connections, attribute)
        if kind == "counter":
            return CounterMetricFamily(name, help_text, value=value)
        return GaugeMetricFamily(name, help_text, value=value)
    family.__name__ = name
    return family


FAMILIES: tuple[Family, ...] = (requests, injections, events, binds, bind_latency, binds_waiting, binds_evicted,
                                activation_epoch, active_profile,
                                *(connection_family(*row) for row in CONNECTIONS), journal_records)


class RuntimeCollector:
    """A custom collector: every scrape reads the runtime's counters afresh."""

    def __init__(self, runtime: Runtime, families: tuple[Family, ...] = FAMILIES) -> None:
        self.runtime = runtime
        self.families = families

    def collect(self) -> Iterator[Metric]:
        """Each family's current value."""
        for family in self.families:
            yield family(self.runtime)

    def describe(self) -> list[Metric]:
        """Nothing up front: registering must not read the runtime."""
        return []


class LibraryChangesCollector:
    """kfp_library_change{change,applied,reason}: one sample, 1, per change of mitm/patches, as serve applied
    or skipped it at start-up (fixed for the process's life)."""

    def __init__(self, changes: Sequence[Mapping[str, Any]]) -> None:
        self.changes = [dict(c) for c in changes]

    def collect(self) -> Iterator[Metric]:
        """One sample per library change."""
        m = GaugeMetricFamily("kfp_library_change", "Each change the proxy makes to mitmproxy, hyper-h2 or hpack: "
                              "applied (its verified source is installed) or skipped, with the reason.",
                              labels=("change", "applied", "reason"))
        for c in self.changes:
            m.add_metric((str(c["name"]), "true" if c["applied"] else "false", str(c["reason"])), 1)
        yield m

    def describe(self) -> list[Metric]:
        """Nothing up front."""
        return []


def registry_for(runtime: Runtime, library_changes: Sequence[Mapping[str, Any]] = ()) -> CollectorRegistry:
    """A registry of its own per app (never the global one): the runtime's families, the library changes,
    plus process, platform and GC metrics (CPU, RSS, open fds, Python version, collections)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RuntimeCollector(runtime))
    registry.register(LibraryChangesCollector(library_changes))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry
