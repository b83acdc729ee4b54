"""Health, stats, the journal and Prometheus metrics."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from kube_fault_proxy.proxy.control.deps import RuntimeDep
from kube_fault_proxy.proxy.runtime import Runtime

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
    limit: Annotated[int, Query(ge=1, le=10000, description="return at most this many records, the oldest "
                                                            "first; `next` says where to go on")] = 1000,
    runtime: Runtime = RuntimeDep,
) -> dict[str, Any]:
    """Journal records after `since`, oldest first; `next` is the cursor for the following call."""
    records = runtime.journal.since(since, limit)
    return {"records": records, "next": records[-1]["seq"] if records else since}


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}, "application/openmetrics-text": {}},
                     "description": "Prometheus text format, or OpenMetrics if the Accept header asks for it."}},
)
async def metrics(request: Request) -> Response:
    """Prometheus metrics: the proxy's counters and the process's own (OpenMetrics on request)."""
    registry: CollectorRegistry = request.app.state.metrics  # read on the proxy's loop, like every handler
    encode, content_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encode(registry), media_type=content_type)
