"""/v1/cluster: the source of FaultProfiles and FaultActivations (serve --profiles-from-cluster)."""

from __future__ import annotations

from typing import Any, Protocol

from fastapi import APIRouter, Request

router = APIRouter(prefix="/v1/cluster", tags=["observe"])


class ClusterView(Protocol):
    """What the control plane reads from the cluster source."""

    def describe(self) -> dict[str, Any]: ...


@router.get("")
async def get_cluster(request: Request) -> dict[str, Any]:
    """Whether the proxy takes profiles from the cluster; if so, the namespace, its name and labels, sync
    state, relists, status writes, and the activation it applied."""
    source: ClusterView | None = request.app.state.cluster
    if source is None:
        return {"enabled": False}
    return {"enabled": True, **source.describe()}
