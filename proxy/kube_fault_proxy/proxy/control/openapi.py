"""The served OpenAPI document: the FaultProfile schema, every error answer a route can give, and
security as the server has it (a bearer token required only when it runs with one)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from kube_fault_proxy.proxy.control.errors import phrase
from kube_fault_proxy.proxy.control.feed_schema import FRAME
from kube_fault_proxy.proxy.profiles.profile import FaultProfile

REF = "#/components/schemas/{model}"
ERROR = {"application/json": {"schema": {"$ref": REF.format(model="ErrorBody")}}}
METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
UNGUARDED_401 = "Unauthorized: only with a control token, and this proxy runs without one"
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


def _error(code: int) -> dict[str, Any]:
    return {"description": phrase(code), "content": ERROR}


def _exact_bounds(node: Any) -> None:
    """FastAPI's document model keeps bounds as floats (`seed < 2**63` became 9.223372036854776e18):
    give the integral ones back as integers, exact for a validator that compares integers."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in BOUNDS and isinstance(value, float) and value.is_integer():
                node[key] = int(value)
            else:
                _exact_bounds(value)
    elif isinstance(node, list):
        for value in node:
            _exact_bounds(value)


def _set_means_not_null(schema: dict[str, Any]) -> None:
    """`exactly one of these keys`: the loader counts a key set to null as not set, so say so in each branch."""
    for branch in schema.get("oneOf", []):
        if isinstance(branch, dict) and list(branch) == ["required"] and len(branch["required"]) == 1:
            branch["properties"] = {branch["required"][0]: {"not": {"type": "null"}}}


def _security(operation: dict[str, Any], guarded: bool) -> None:
    """With a token a guarded call needs it (401 without); without one the header may be sent and is
    ignored: an empty requirement says no credentials are needed."""
    if not operation.get("security"):
        return
    answers = operation["responses"]
    if guarded:
        answers.setdefault("401", _error(401))
    else:
        operation["security"] = [{}, *operation["security"]]
        answers.setdefault("401", {**_error(401), "description": UNGUARDED_401})


def document(app: FastAPI) -> dict[str, Any]:
    """Build (once) the document FastAPI serves, completed where its defaults fall short."""
    if app.openapi_schema:
        return app.openapi_schema
    doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    guarded = getattr(app.state, "token", None) is not None
    schemas: dict[str, Any] = doc.setdefault("components", {}).setdefault("schemas", {})
    profile = FaultProfile.model_json_schema(by_alias=True, ref_template=REF)
    for name, schema in profile.pop("$defs", {}).items():
        schemas.setdefault(name, schema)
    schemas["FaultProfile"] = profile
    schemas["FeedFrame"] = FRAME
    for schema in schemas.values():
        _set_means_not_null(schema)
    for item in doc.get("paths", {}).values():
        for method in METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            answers = operation.setdefault("responses", {})
            if "422" in answers:  # FastAPI's own validation errors come in our ErrorBody too
                answers["422"] = _error(422)
            _security(operation, guarded)
            if "requestBody" in operation:
                answers.setdefault("400", _error(400))  # a body too malformed to parse at all
                answers.setdefault("413", _error(413))
    if REF.format(model="HTTPValidationError") not in json.dumps(doc["paths"]):
        schemas.pop("HTTPValidationError", None)  # and the item type only it uses
        schemas.pop("ValidationError", None)
    _exact_bounds(doc)
    app.openapi_schema = doc
    return doc
