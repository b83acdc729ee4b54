"""The served OpenAPI document: the FaultProfile schema, and every error answer a route can give."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from kube_fault_proxy.proxy.control.errors import phrase
from kube_fault_proxy.proxy.profiles.profile import FaultProfile

REF = "#/components/schemas/{model}"
ERROR = {"application/json": {"schema": {"$ref": REF.format(model="ErrorBody")}}}
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def _error(code: int) -> dict[str, Any]:
    return {"description": phrase(code), "content": ERROR}


def document(app: FastAPI) -> dict[str, Any]:
    """Build (once) the document FastAPI serves, completed where its defaults fall short."""
    if app.openapi_schema:
        return app.openapi_schema
    doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    schemas: dict[str, Any] = doc.setdefault("components", {}).setdefault("schemas", {})
    profile = FaultProfile.model_json_schema(by_alias=True, ref_template=REF)
    for name, schema in profile.pop("$defs", {}).items():
        schemas.setdefault(name, schema)
    schemas["FaultProfile"] = profile
    for item in doc.get("paths", {}).values():
        for method in METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            answers = operation.setdefault("responses", {})
            if "422" in answers:  # FastAPI's own validation errors come in our ErrorBody too
                answers["422"] = _error(422)
            if operation.get("security"):
                answers.setdefault("401", _error(401))
            if "requestBody" in operation:
                answers.setdefault("400", _error(400))  # a body too malformed to parse at all
                answers.setdefault("413", _error(413))
    if REF.format(model="HTTPValidationError") not in json.dumps(doc["paths"]):
        schemas.pop("HTTPValidationError", None)  # and the item type only it uses
        schemas.pop("ValidationError", None)
    app.openapi_schema = doc
    return doc
