"""/ui/: the dashboard's page, served from files in the package; public, since it holds no data."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse, RedirectResponse

UI_DIR = Path(__file__).with_name("ui")
FILES = {"index.html": "text/html", "app.js": "text/javascript", "charts.js": "text/javascript",
         "style.css": "text/css"}
# Everything the page loads comes from this origin: no CDN, no inline script, no framing.
HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                "connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'"),
}

router = APIRouter(include_in_schema=False)


@router.get("/")
@router.get("/ui")
async def to_ui() -> RedirectResponse:
    """The dashboard is the control plane's front page."""
    return RedirectResponse("/ui/")


@router.get("/ui/")
@router.get("/ui/{name}")
async def ui_file(name: str = "index.html") -> FileResponse:
    """One of the page's own files (a fixed list: nothing else under the directory is served)."""
    if name not in FILES:
        raise HTTPException(404, detail=f"no such dashboard file: {name}")
    return FileResponse(UI_DIR / name, media_type=FILES[name], headers=HEADERS)
