"""/v1/profiles: list, read, upload (YAML or JSON) and delete profiles."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from proxy.control.deps import RuntimeDep
from proxy.profile_loader import Problem, ProfileError, load_text, to_yaml
from proxy.runtime import Runtime, UnknownProfile

router = APIRouter(prefix="/v1/profiles", tags=["profiles"])
BODY_DOC: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/yaml": {"schema": {"type": "string"}},
            "application/json": {"schema": {"$ref": "#/components/schemas/FaultProfile"}},
        },
    }
}


def summary(runtime: Runtime, name: str) -> dict[str, Any]:
    """Name, description, rule count, source, and whether it is the active profile."""
    entry = runtime.library.get(name)
    if entry is None:
        raise UnknownProfile(name)
    active = runtime.active is not None and runtime.active.engine.profile.name == name
    meta = entry.profile.metadata
    return {
        "name": name,
        "description": meta.description,
        "incident": meta.incident,
        "rules": [r.name for r in entry.profile.spec.rules],
        "source": entry.source,
        "active": active,
    }


@router.get("")
async def list_profiles(runtime: Runtime = RuntimeDep) -> dict[str, Any]:
    """Every profile the proxy knows."""
    return {"profiles": [summary(runtime, n) for n in runtime.library.names()]}


@router.get("/{name}")
async def get_profile(name: str, request: Request, runtime: Runtime = RuntimeDep) -> Response:
    """One profile, as JSON, or as YAML when the client accepts application/yaml."""
    entry = runtime.library.get(name)
    if entry is None:
        raise UnknownProfile(name)
    if "yaml" in request.headers.get("accept", ""):
        return Response(to_yaml(entry.profile), media_type="application/yaml")
    return Response(
        entry.profile.model_dump_json(by_alias=True, exclude_none=True),
        media_type="application/json",
    )


@router.put("/{name}", openapi_extra=BODY_DOC)
async def put_profile(name: str, request: Request, runtime: Runtime = RuntimeDep) -> dict[str, Any]:
    """Add or replace a profile; an invalid one is refused with 422 and changes nothing."""
    source = f"PUT /v1/profiles/{name}"
    raw = await request.body()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ProfileError([Problem(source, None, None, "", "body is not UTF-8")]) from None
    profile = load_text(text, source)
    if profile.name != name:
        raise ProfileError(
            [Problem(source, None, None, "metadata.name",
                     f"{profile.name!r} does not match the name in the URL ({name!r})")]
        )
    replaced = runtime.library.put(profile, "api")
    return {"replaced": replaced, **summary(runtime, name)}


@router.delete("/{name}")
async def delete_profile(name: str, runtime: Runtime = RuntimeDep) -> dict[str, Any]:
    """Remove a profile; the active profile cannot be removed (409)."""
    if not runtime.delete_profile(name):
        raise UnknownProfile(name)
    return {"deleted": name}
