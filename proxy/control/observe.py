"""Health, stats, the journal and Prometheus metrics."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import PlainTextResponse

from proxy.control.deps import RuntimeDep
from proxy.runtime import Runtime

router = APIRouter(tags=["observe"])


@router.get("/v1/stats")
async def get_stats(runtime: Runtime = RuntimeDep) -> dict[str, Any]:
    """Requests seen, per-rule counters of the active profile, injections per rule and kind."""
    return runtime.stats()


@router.post("/v1/stats/reset")
async def reset_stats(runtime: Runtime = RuntimeDep) -> dict[str, Any]:
    """Zero the stats (the journal and the active profile's own limits are untouched)."""
    runtime.reset_stats()
    return runtime.stats()


@router.get("/v1/journal")
async def get_journal(
    since: Annotated[int, Query(ge=0, description="return records after this seq")] = 0,
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
    runtime: Runtime = RuntimeDep,
) -> dict[str, Any]:
    """Journal records after `since`, oldest first; `next` is the cursor for the following call."""
    records = runtime.journal.since(since, limit)
    return {"records": records, "next": records[-1]["seq"] if records else since}


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def metrics_text(runtime: Runtime) -> str:
    """The Prometheus text exposition of the runtime's counters."""
    lines = [
        "# HELP kfp_requests_total Requests seen by the proxy.",
        "# TYPE kfp_requests_total counter",
        f"kfp_requests_total {runtime.requests}",
        "# HELP kfp_injections_total Faults injected, by profile, rule and fault kind.",
        "# TYPE kfp_injections_total counter",
    ]
    for (p, r, f), n in sorted(runtime.injections_total.items()):
        lines.append(
            f'kfp_injections_total{{profile="{_label(p)}",rule="{_label(r)}",fault="{_label(f)}"}} {n}'
        )
    lines += [
        "# HELP kfp_events_total Proxy events that are not injections (e.g. upstream-lost).",
        "# TYPE kfp_events_total counter",
    ]
    for event, n in sorted(runtime.events_total.items()):
        lines.append(f'kfp_events_total{{event="{_label(event)}"}} {n}')
    lines += [
        "# HELP kfp_activation_epoch Activation epoch (increments on every activation).",
        "# TYPE kfp_activation_epoch gauge",
        f"kfp_activation_epoch {runtime.epoch}",
        "# HELP kfp_active_profile 1 for the active profile.",
        "# TYPE kfp_active_profile gauge",
    ]
    if runtime.active is not None:
        lines.append(f'kfp_active_profile{{profile="{_label(runtime.active.engine.profile.name)}"}} 1')
    counts = runtime.connections
    lines += [
        "# HELP kfp_client_connections_accepted_total Client connections the proxy accepted.",
        "# TYPE kfp_client_connections_accepted_total counter",
        f"kfp_client_connections_accepted_total {counts.client_accepted}",
        "# HELP kfp_client_connections_open Client connections open now.",
        "# TYPE kfp_client_connections_open gauge",
        f"kfp_client_connections_open {counts.client_open}",
        "# HELP kfp_upstream_connections_opened_total Upstream (apiserver) connections the proxy opened.",
        "# TYPE kfp_upstream_connections_opened_total counter",
        f"kfp_upstream_connections_opened_total {counts.upstream_opened}",
        "# HELP kfp_upstream_connections_open Upstream connections open now.",
        "# TYPE kfp_upstream_connections_open gauge",
        f"kfp_upstream_connections_open {counts.upstream_open}",
        "# HELP kfp_upstream_connect_failures_total Upstream connects that failed.",
        "# TYPE kfp_upstream_connect_failures_total counter",
        f"kfp_upstream_connect_failures_total {counts.upstream_failed}",
    ]
    lines += [
        "# HELP kfp_journal_records_total Records written to the journal.",
        "# TYPE kfp_journal_records_total counter",
        f"kfp_journal_records_total {runtime.journal.seq}",
    ]
    return "\n".join(lines) + "\n"


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(runtime: Runtime = RuntimeDep) -> str:
    """Prometheus metrics."""
    return metrics_text(runtime)
