"""Build the control-plane app; nothing else happens here."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from kube_fault_proxy import __version__
from kube_fault_proxy.proxy.control import active, errors, events, metrics, observe, openapi, profiles, ui
from kube_fault_proxy.proxy.control import cluster as cluster_routes
from kube_fault_proxy.proxy.control.body_limit import BodyLimit
from kube_fault_proxy.proxy.control.deps import require_token
from kube_fault_proxy.proxy.control.feed import Feed
from kube_fault_proxy.proxy.control.parsing import Parser, ThreadParser
from kube_fault_proxy.proxy.profiles.loader import LIMITS
from kube_fault_proxy.proxy.runtime import Runtime

TITLE = "kube-fault-proxy control plane"


def build_app(runtime: Runtime, info: dict[str, Any], token: str | None = None,
              parser: Parser | None = None, cluster: cluster_routes.ClusterView | None = None) -> FastAPI:
    """The app over a runtime; `info` says where things are; uploads go to `parser` (default: a thread);
    `cluster` is the source of FaultProfiles and FaultActivations, when the proxy has one."""
    # With a token, everything but /healthz needs it, the API documents included, and /healthz
    # says only that the proxy is alive.
    app = FastAPI(title=TITLE, version=__version__, openapi_url=None, docs_url=None, redoc_url=None,
                  description="Switch fault profiles live, read stats and the journal. With a control "
                              "token, every call but /healthz needs `Authorization: Bearer TOKEN`.")
    app.state.runtime = runtime
    app.state.token = token
    app.state.metrics = metrics.registry_for(runtime, info.get("libraryChanges", []))
    app.state.parser = parser or ThreadParser()
    app.state.feed = Feed(runtime)
    app.state.cluster = cluster
    app.add_middleware(BodyLimit, max_bytes=LIMITS.max_bytes)
    errors.install(app)
    guarded = [Depends(require_token)]
    for router in (profiles.router, active.router, observe.router, events.router, cluster_routes.router):
        app.include_router(router, dependencies=guarded)
    app.include_router(ui.router)

    @app.get("/healthz", tags=["observe"])
    async def healthz() -> dict[str, Any]:
        """Liveness; without a control token also the proxy URL, its CA file and the active profile."""
        if token is not None:
            return {"ok": True}
        active_name = runtime.activations.active.engine.profile.name if runtime.activations.active else None
        return {"ok": True, "version": __version__, "active": active_name,
                "proxyUrl": info.get("proxyUrl"), "caFile": info.get("caFile")}

    @app.get("/v1/info", tags=["observe"], dependencies=guarded)
    async def get_info() -> dict[str, Any]:
        """Version, active profile, where the proxy listens, forwards to and journals, and each library change
        (mitm/patches) as applied or skipped, with the reason."""
        active_name = runtime.activations.active.engine.profile.name if runtime.activations.active else None
        return {"version": __version__, "active": active_name, **info}

    app.openapi = lambda: openapi.document(app)  # type: ignore[method-assign]

    @app.get("/openapi.json", include_in_schema=False, dependencies=guarded)
    async def openapi_json() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=guarded)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=TITLE)

    @app.get("/redoc", include_in_schema=False, dependencies=guarded)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url="/openapi.json", title=TITLE)

    return app
