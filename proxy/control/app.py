"""Build the control-plane app; nothing else happens here."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI

from proxy import __version__
from proxy.control import active, errors, metrics, observe, profiles
from proxy.control.deps import require_token
from proxy.runtime import Runtime


def build_app(runtime: Runtime, info: dict[str, Any], token: str | None = None) -> FastAPI:
    """The FastAPI app over a runtime; `info` is what /healthz reports (proxy URL, CA file)."""
    app = FastAPI(
        title="kube-fault-proxy control plane",
        version=__version__,
        description="Switch fault profiles live, read stats and the journal.",
    )
    app.state.runtime = runtime
    app.state.token = token
    app.state.metrics = metrics.registry_for(runtime)
    errors.install(app)
    guarded = [Depends(require_token)]
    for router in (profiles.router, active.router, observe.router):
        app.include_router(router, dependencies=guarded)

    @app.get("/healthz", tags=["observe"])
    def healthz() -> dict[str, Any]:
        """Liveness, plus where the proxy listens and the CA clients must trust."""
        active_name = runtime.active.engine.profile.name if runtime.active else None
        return {"ok": True, "version": __version__, "active": active_name, **info}

    return app
