"""Shared dependencies: the runtime and the bearer-token guard."""

from __future__ import annotations

import hmac

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from kube_fault_proxy.proxy.runtime import Runtime

# Documents the scheme in the OpenAPI document; matches "Bearer" in any case (RFC 7235).
_bearer = HTTPBearer(auto_error=False, description="required when the proxy runs with --control-token")
BearerDep = Depends(_bearer)


async def get_runtime(request: Request) -> Runtime:
    """The proxy's runtime, stored on the app at build time."""
    runtime: Runtime = request.app.state.runtime
    return runtime


async def require_token(
    request: Request, credentials: HTTPAuthorizationCredentials | None = BearerDep
) -> None:
    """When the control plane has a token, every call but /healthz must carry it."""
    token: str | None = request.app.state.token
    if token is None:
        return
    given = credentials.credentials.strip() if credentials is not None else ""
    if not hmac.compare_digest(given.encode(), token.encode()):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="a bearer token is required (Authorization: Bearer …)",
            headers={"WWW-Authenticate": "Bearer"},
        )


RuntimeDep = Depends(get_runtime)
