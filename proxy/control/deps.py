"""Shared dependencies: the runtime and the bearer-token guard."""

from __future__ import annotations

import hmac

from fastapi import Depends, HTTPException, Request, status

from proxy.runtime import Runtime


async def get_runtime(request: Request) -> Runtime:
    """The proxy's runtime, stored on the app at build time."""
    runtime: Runtime = request.app.state.runtime
    return runtime


async def require_token(request: Request) -> None:
    """When the control plane has a token, every call but /healthz must carry it."""
    token: str | None = request.app.state.token
    if token is None:
        return
    given = request.headers.get("authorization", "")
    if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="a bearer token is required (Authorization: Bearer …)",
            headers={"WWW-Authenticate": "Bearer"},
        )


RuntimeDep = Depends(get_runtime)
