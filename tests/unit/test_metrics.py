"""/metrics through prometheus_client: names, HELP/TYPE, escaping, process metrics, OpenMetrics, scrape-time only."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from kube_fault_proxy.proxy.control import metrics
from kube_fault_proxy.proxy.control.app import build_app
from kube_fault_proxy.proxy.journal import Journal
from kube_fault_proxy.proxy.profiles.library import Library, load_dir
from kube_fault_proxy.proxy.runtime import Runtime
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from tests.support.builders import BIND_MATCH, bind, get_pod, profile
from tests.support.mitm import Clock

ROOT = Path(__file__).resolve().parents[2]
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    lib = Library(load_dir(ROOT / "fault_profiles"))
    lib.put(profile({"name": "fail", "match": BIND_MATCH, "fault": {"abort": {"status": 500}}}, name="mine"),
            source="test")
    return Runtime(lib, Journal(tmp_path / "j.jsonl", time.time), time.monotonic, time.time)


@pytest.fixture
def client(runtime: Runtime) -> TestClient:
    return TestClient(build_app(runtime, {}))


def samples(text: str) -> Samples:
    """Every sample of a Prometheus text exposition, keyed by name and sorted labels."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def families(text: str) -> dict[str, str]:
    """Family name -> type."""
    return {f.name: f.type for f in text_string_to_metric_families(text)}


def drive(runtime: Runtime, binds: int = 3) -> None:
    """Some traffic: binds failed by the active profile, a GET, Binding outcomes (one succeeded, two
    throttled), an event, and bind latencies (0.3 s and 4 s committed, one pod waiting)."""
    runtime.activations.activate("mine", seed=1)
    lat, clock = runtime.counters.bind_latency, Clock()
    lat.clock = clock
    for pod in ("a", "b", "c"):
        lat.attempt(pod)
    clock.now += 0.3
    lat.committed("a")
    clock.now += 3.7
    lat.committed("b")
    for i in range(binds):
        ident = bind(f"p{i}")
        d = runtime.decide(ident)
        assert d is not None
        runtime.counters.performed(d, ident, action="respond 500")
        runtime.counters.bind_outcome(500)
    runtime.counters.bind_outcome(201)
    runtime.counters.bind_outcome(429, "1")
    runtime.counters.bind_outcome(429, "1")
    assert runtime.decide(get_pod("x")) is None
    runtime.counters.note("upstream-lost", connection="c1")
    conns = runtime.counters.connections
    for _ in range(3):
        conns.client_connected()
    conns.client_disconnected()
    for _ in range(2):
        conns.upstream_connected()
    conns.upstream_disconnected()
    conns.upstream_connect_failed()


@pytest.mark.parametrize(("name", "labels", "value"), [
    ("kfp_requests_total", {}, 4),
    ("kfp_injections_total", {"profile": "mine", "rule": "fail", "fault": "abort"}, 3),
    ("kfp_events_total", {"event": "upstream-lost"}, 1),
    ("kfp_binds_total", {"outcome": "succeeded"}, 1),
    ("kfp_binds_total", {"outcome": "throttled"}, 2),
    ("kfp_binds_total", {"outcome": "failed"}, 3),
    ("kfp_bind_latency_seconds_bucket", {"le": "0.25"}, 0),
    ("kfp_bind_latency_seconds_bucket", {"le": "0.5"}, 1),
    ("kfp_bind_latency_seconds_bucket", {"le": "2.5"}, 1),
    ("kfp_bind_latency_seconds_bucket", {"le": "5.0"}, 2),
    ("kfp_bind_latency_seconds_bucket", {"le": "+Inf"}, 2),
    ("kfp_bind_latency_seconds_count", {}, 2),
    ("kfp_bind_latency_seconds_sum", {}, 4.3),
    ("kfp_bind_latency_waiting_pods", {}, 1),
    ("kfp_bind_latency_evicted_total", {}, 0),
    ("kfp_activation_epoch", {}, 1),
    ("kfp_active_profile", {"profile": "mine"}, 1),
    ("kfp_journal_records_total", {}, 5),  # activate, three injections, upstream-lost
    ("kfp_client_connections_accepted_total", {}, 3),
    ("kfp_client_connections_open", {}, 2),
    ("kfp_upstream_connections_opened_total", {}, 2),
    ("kfp_upstream_connections_open", {}, 1),
    ("kfp_upstream_connect_failures_total", {}, 1),
])
def test_runtime_counters_are_exported_under_todays_names(
    client: TestClient, runtime: Runtime, name: str, labels: dict[str, str], value: float
) -> None:
    drive(runtime)
    got = samples(client.get("/metrics").text)
    assert got[(name, tuple(sorted(labels.items())))] == pytest.approx(value)


@pytest.mark.parametrize(("family", "kind"), [
    ("kfp_requests", "counter"), ("kfp_injections", "counter"), ("kfp_events", "counter"), ("kfp_binds", "counter"),
    ("kfp_bind_latency_seconds", "histogram"), ("kfp_bind_latency_waiting_pods", "gauge"),
    ("kfp_bind_latency_evicted", "counter"),
    ("kfp_activation_epoch", "gauge"), ("kfp_active_profile", "gauge"), ("kfp_journal_records", "counter"),
    ("process_cpu_seconds", "counter"), ("process_resident_memory_bytes", "gauge"), ("process_open_fds", "gauge"),
    ("python_info", "gauge"), ("kfp_client_connections_accepted", "counter"), ("kfp_client_connections_open", "gauge"),
    ("kfp_upstream_connections_opened", "counter"), ("kfp_upstream_connections_open", "gauge"),
    ("kfp_upstream_connect_failures", "counter"),
])
def test_every_family_has_help_and_type(client: TestClient, runtime: Runtime, family: str, kind: str) -> None:
    drive(runtime)
    text = client.get("/metrics").text
    assert families(text)[family] == kind
    exposed = family + ("_total" if kind == "counter" else "")
    assert f"# TYPE {exposed} {kind}\n" in text
    assert next(line for line in text.splitlines() if line.startswith(f"# HELP {exposed} ")).strip() != f"# HELP {exposed}"


def test_process_metrics_are_this_process(client: TestClient) -> None:
    got = samples(client.get("/metrics").text)
    page = os.sysconf("SC_PAGE_SIZE")
    rss = int(Path("/proc/self/statm").read_text().split()[1]) * page
    assert got[("process_resident_memory_bytes", ())] == pytest.approx(rss, rel=0.5)
    assert got[("process_open_fds", ())] == pytest.approx(len(os.listdir("/proc/self/fd")), abs=5)
    assert 0 < got[("process_cpu_seconds_total", ())] <= time.process_time() + 1
    assert got[("process_start_time_seconds", ())] <= time.time()


def test_no_active_profile_means_no_active_sample_and_reset_keeps_counters(
    client: TestClient, runtime: Runtime
) -> None:
    drive(runtime)
    client.post("/v1/stats/reset")
    runtime.activations.deactivate()
    got = samples(client.get("/metrics").text)
    assert not [k for k in got if k[0] == "kfp_active_profile"]
    assert got[("kfp_injections_total", (("fault", "abort"), ("profile", "mine"), ("rule", "fail")))] == 3
    assert got[("kfp_binds_total", (("outcome", "throttled"),))] == 2


def test_label_values_are_escaped(client: TestClient, runtime: Runtime) -> None:
    odd = 'quote " backslash \\ newline \n end'
    runtime.counters.note(odd)
    assert samples(client.get("/metrics").text)[("kfp_events_total", (("event", odd),))] == 1


@pytest.mark.parametrize(("accept", "content_type", "openmetrics"), [
    (None, "text/plain; version=0.0.4; charset=utf-8", False),
    ("text/plain", "text/plain; version=0.0.4; charset=utf-8", False),
    ("application/openmetrics-text; version=1.0.0,text/plain;version=0.0.4;q=0.5",
     "application/openmetrics-text; version=1.0.0; charset=utf-8", True),
    ("application/openmetrics-text", "application/openmetrics-text; version=1.0.0; charset=utf-8", True),
])
def test_openmetrics_is_negotiated_by_accept(
    client: TestClient, runtime: Runtime, accept: str | None, content_type: str, openmetrics: bool
) -> None:
    drive(runtime)
    r = client.get("/metrics", headers={"Accept": accept} if accept else {})
    assert r.status_code == 200
    assert r.headers["content-type"].split("; escaping=")[0] == content_type
    assert r.text.endswith("# EOF\n") is openmetrics
    if openmetrics:
        parsed = {f.name: f for f in openmetrics_families(r.text)}
        assert parsed["kfp_injections"].type == "counter"
        assert [s.value for s in parsed["kfp_injections"].samples] == [3]


def test_each_app_has_its_own_registry(tmp_path: Path) -> None:
    lib = Library(load_dir(ROOT / "fault_profiles"))
    one = Runtime(lib, Journal(tmp_path / "1.jsonl", time.time), time.monotonic, time.time)
    two = Runtime(lib, Journal(tmp_path / "2.jsonl", time.time), time.monotonic, time.time)
    a, b = TestClient(build_app(one, {})), TestClient(build_app(two, {}))
    one.decide(get_pod("x"))
    assert samples(a.get("/metrics").text)[("kfp_requests_total", ())] == 1
    assert samples(b.get("/metrics").text)[("kfp_requests_total", ())] == 0
    from prometheus_client import REGISTRY
    assert "kfp_requests" not in {f.name for f in REGISTRY.collect()}


def test_the_per_request_path_never_touches_prometheus(
    client: TestClient, runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    def counting(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return real(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(CollectorRegistry, "collect", counting("registry", CollectorRegistry.collect))
    monkeypatch.setattr(metrics.RuntimeCollector, "collect", counting("collector", metrics.RuntimeCollector.collect))
    for kind in ("CounterMetricFamily", "GaugeMetricFamily", "HistogramMetricFamily"):
        monkeypatch.setattr(metrics, kind, counting(kind, getattr(metrics, kind)))

    drive(runtime, binds=500)
    for i in range(500):
        runtime.decide(get_pod(f"g{i}"))
        runtime.counters.bind_outcome(201)
        runtime.counters.bind_latency.attempt(f"p{i}")
        runtime.counters.bind_latency.committed(f"p{i}")
        runtime.counters.note("watch-event", n=i)
    assert calls == []

    assert samples(client.get("/metrics").text)[("kfp_requests_total", ())] == 1001
    assert calls.count("registry") == 1 and calls.count("collector") == 1
    # the runtime's families, and the library changes' (built from what serve applied, not from the runtime)
    assert calls.count("CounterMetricFamily") + calls.count("GaugeMetricFamily") + \
        calls.count("HistogramMetricFamily") == len(metrics.FAMILIES) + 1


def test_library_changes_are_listed_as_applied_or_skipped_with_the_reason(runtime: Runtime) -> None:
    changes = [{"name": "streams", "summary": "s", "applied": True, "reason": "the verified source is installed"},
               {"name": "header_checks", "summary": "h", "applied": False, "reason": "h2 4.3.0 differs"}]
    client = TestClient(build_app(runtime, {"libraryChanges": changes}))
    got = samples(client.get("/metrics").text)
    assert got[("kfp_library_change", (("applied", "true"), ("change", "streams"),
                                       ("reason", "the verified source is installed")))] == 1
    assert got[("kfp_library_change", (("applied", "false"), ("change", "header_checks"),
                                       ("reason", "h2 4.3.0 differs")))] == 1
    assert client.get("/v1/info").json()["libraryChanges"] == changes


PROMTOOL = os.environ.get("KFP_PROMTOOL") or shutil.which("promtool")


def test_promtool_accepts_the_exposition(client: TestClient, runtime: Runtime) -> None:
    # A missing tool is a failure, not a skip: scripts/test unpacks Debian's and sets KFP_PROMTOOL.
    assert PROMTOOL, "no promtool: run scripts/test, or set KFP_PROMTOOL=$(scripts/fetch-promtool)"
    drive(runtime)
    text = client.get("/metrics").text  # promtool lints the Prometheus text format (not OpenMetrics)
    r = subprocess.run([str(PROMTOOL), "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
