"""Domain errors mapped to HTTP answers in one place."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from proxy.profile_loader import ProfileError
from proxy.runtime import ProfileInUse, UnknownProfile


def install(app: FastAPI) -> None:
    """Register the handlers on an app."""

    @app.exception_handler(ProfileError)
    async def invalid_profile(request: Request, exc: ProfileError) -> JSONResponse:
        return JSONResponse(
            status_code=422,
            content={
                "error": "invalid profile",
                "message": str(exc),
                "problems": [p.as_dict() for p in exc.problems],
            },
        )

    @app.exception_handler(UnknownProfile)
    async def unknown_profile(request: Request, exc: UnknownProfile) -> JSONResponse:
        return JSONResponse(
            status_code=404, content={"error": "unknown profile", "message": f"no profile {exc}"}
        )

    @app.exception_handler(ProfileInUse)
    async def profile_in_use(request: Request, exc: ProfileInUse) -> JSONResponse:
        return JSONResponse(
            status_code=409,
            content={
                "error": "profile is active",
                "message": f"profile {exc} is active; deactivate it first",
            },
        )
