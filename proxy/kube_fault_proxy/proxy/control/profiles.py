"""/v1/profiles: list, read, upload (YAML or JSON) and delete profiles."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response

from kube_fault_proxy.proxy.control import json_text
from kube_fault_proxy.proxy.control.deps import RuntimeDep
from kube_fault_proxy.proxy.control.errors import responses
from kube_fault_proxy.proxy.control.parsing import Parser
from kube_fault_proxy.proxy.profiles.loader import Problem, ProfileError, to_yaml
from kube_fault_proxy.proxy.profiles.profile import NAME_PATTERN
from kube_fault_proxy.proxy.runtime import Runtime, UnknownProfile

router = APIRouter(prefix="/v1/profiles", tags=["profiles"])
PROFILE_REF = {"$ref": "#/components/schemas/FaultProfile"}
BODY_DOC: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {  # YAML or JSON text of the same document
            "application/yaml": {"schema": PROFILE_REF},
            "application/json": {"schema": PROFILE_REF},
        },
    }
}
PROFILE_DOC: dict[int | str, dict[str, Any]] = {
    200: {"description": "The profile", "content": {"application/json": {"schema": PROFILE_REF},
                                                    "application/yaml": {"schema": PROFILE_REF}}},
}
Name = Annotated[str, Path(examples=["bind-fail-30pct"], description="a profile's name (its metadata.name)")]
NewName = Annotated[str, Path(pattern=NAME_PATTERN, examples=["bind-fail-30pct"],  # what metadata.name may be
                              description="the profile's name; the body's metadata.name must be the same")]


def summary(runtime: Runtime, name: str) -> dict[str, Any]:
    """Name, description, rule count, source, and whether it is the active profile."""
    entry = runtime.library.get(name)
    if entry is None:
        raise UnknownProfile(name)
    active = runtime.activations.active is not None and runtime.activations.active.engine.profile.name == name
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


@router.get("/{name}", responses={**PROFILE_DOC, **responses(404)})
async def get_profile(name: Name, request: Request, runtime: Runtime = RuntimeDep) -> Response:
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


@router.put("/{name}", openapi_extra=BODY_DOC, responses=responses(422))
async def put_profile(name: NewName, request: Request, runtime: Runtime = RuntimeDep) -> dict[str, Any]:
    """Add or replace a profile (at most 256 KiB, parsed away from the proxy's traffic); an invalid one is
    422, and so is one whose `metadata.name` is not the name in the URL, with two rules of one name, or
    with an integer written as a fraction (7.0: the text is read as YAML, JSON included, where it is a float)."""
    source = f"PUT /v1/profiles/{name}"
    raw = await request.body()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProfileError([Problem(source, None, None, "", f"body is not UTF-8 (byte {e.start})")]) from None
    parser: Parser = request.app.state.parser
    shifts: json_text.Shifts = {}
    if "json" in request.headers.get("content-type", ""):
        text, shifts = json_text.as_yaml(text)
    try:
        profile = await parser.parse(text, source)
    except ProfileError as e:
        raise json_text.restore(e, shifts) from None
    if profile.name != name:
        raise ProfileError(
            [Problem(source, None, None, "metadata.name",
                     f"{profile.name!r} does not match the name in the URL ({name!r})")]
        )
    replaced = runtime.library.put(profile, "api")
    return {"replaced": replaced, **summary(runtime, name)}


@router.delete("/{name}", responses=responses(404, 409))
async def delete_profile(name: Name, runtime: Runtime = RuntimeDep) -> dict[str, Any]:
    """Remove a profile; the active profile cannot be removed (409)."""
    if not runtime.activations.delete_profile(name):
        raise UnknownProfile(name)
    return {"deleted": name}
