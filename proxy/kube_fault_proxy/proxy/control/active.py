"""/v1/active: which profile is active, switching it live, with an optional seed and TTL."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from kube_fault_proxy.proxy.control.deps import RuntimeDep
from kube_fault_proxy.proxy.control.errors import responses
from kube_fault_proxy.proxy.runtime import Runtime


def _whole(value: Any) -> Any:
    """JSON has one kind of number: 7.0 is the integer 7 (as the document's `integer` says), 7.5 is not."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


class ActivateRequest(BaseModel):
    """PUT /v1/active body; strict like profiles: no unknown keys, no coercion (`"seed": false`)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    profile: str = Field(examples=["bind-fail-30pct"])
    seed: Annotated[int, Field(ge=0, lt=2**63), BeforeValidator(_whole)] | None = None
    ttlSeconds: Annotated[float, Field(gt=0, le=7 * 24 * 3600)] | None = Field(
        None, description="revert to pass-through by itself after this long"
    )


router = APIRouter(prefix="/v1/active", tags=["active"])


def _view(runtime: Runtime) -> dict[str, Any]:
    now = runtime.clock()
    if runtime.activations.active is None:
        return {"profile": None, "epoch": runtime.activations.epoch}
    return runtime.activations.active.describe(now)


@router.get("")
async def get_active(runtime: Runtime = RuntimeDep) -> dict[str, Any]:
    """The active profile, its epoch, seed and remaining TTL; profile null when passing through."""
    return _view(runtime)


@router.put("", responses=responses(404))
async def put_active(body: ActivateRequest, runtime: Runtime = RuntimeDep) -> dict[str, Any]:
    """Activate a profile; effective for the very next request."""
    runtime.activations.activate(body.profile, body.seed, body.ttlSeconds)
    return _view(runtime)


@router.delete("")
async def delete_active(runtime: Runtime = RuntimeDep) -> dict[str, Any]:
    """Back to pass-through."""
    ended = runtime.activations.deactivate()
    return {"deactivated": ended.engine.profile.name if ended else None, **_view(runtime)}
