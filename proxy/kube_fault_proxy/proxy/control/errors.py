"""Domain errors mapped to HTTP answers in one place, all in one documented body shape."""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from kube_fault_proxy.proxy.profiles.problems import MAX_REPORTED, Problem, ProfileError, format_path
from kube_fault_proxy.proxy.runtime import ProfileInUse, UnknownProfile

# RFC 9110's names, fixed here: http.HTTPStatus renamed 413 and 422 in Python 3.13.
METHODS = frozenset({"get", "put", "post", "delete", "patch", "head", "options", "trace"})
PHRASES = {400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
           409: "Conflict", 413: "Content Too Large", 422: "Unprocessable Content"}


def phrase(code: int) -> str:
    """The reason phrase of a status code, the same on every Python version."""
    return PHRASES.get(code) or HTTPStatus(code).phrase


class ProblemOut(BaseModel):
    """One problem: where (line and column when the body was YAML or JSON text) and what."""

    source: str
    line: int | None
    column: int | None
    path: str
    message: str


class ErrorBody(BaseModel):
    """Every 4xx answer: a short error, a message to show, and the problems when there are several."""

    error: str
    message: str
    problems: list[ProblemOut] | None = None
    omitted: int | None = None


def _answer(status: int, error: str, message: str, headers: Mapping[str, str] | None = None,
            problems: ProfileError | None = None) -> JSONResponse:
    body: dict[str, Any] = {"error": error, "message": message}
    if problems is not None:
        body["problems"] = [p.as_dict() for p in problems.problems]
        if problems.omitted:
            body["omitted"] = problems.omitted
    return JSONResponse(status_code=status, content=body, headers=headers)


def responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for the error answers a route can give."""
    return {code: {"model": ErrorBody, "description": phrase(code)} for code in codes}


def _is(template: str, path: str) -> bool:
    """Whether a path is an instance of an OpenAPI path template (`{name}`: one segment)."""
    want, got = template.split("/"), path.split("/")
    return len(want) == len(got) and all(w == g or (w[:1] == "{" and g) for w, g in zip(want, got, strict=True))


def allowed_methods(request: Request) -> str | None:
    """Every method the document serves on the request's path, for a 405's Allow (Starlette names only
    the first route's, and /v1/active is three routes); None for a path the document leaves out."""
    paths: dict[str, dict[str, Any]] = request.app.openapi().get("paths", {})
    for template, item in paths.items():
        if _is(template, request.url.path):
            return ", ".join(sorted(m.upper() for m in item if m in METHODS))
    return None


def _request_problem(source: str, error: dict[str, Any]) -> Problem:
    """One of FastAPI's validation errors as a Problem; a JSON syntax error says where it is."""
    loc = tuple(error.get("loc", ()))
    message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    if error.get("type") == "json_invalid" and len(loc) == 2 and isinstance(loc[1], int):
        detail = (error.get("ctx") or {}).get("error", "")
        return Problem(source, None, None, "body", f"not valid JSON at character {loc[1]}: {detail}")
    return Problem(source, None, None, format_path(loc), message)


def install(app: FastAPI) -> None:
    """Register the handlers on an app."""

    @app.exception_handler(ProfileError)
    async def invalid_profile(request: Request, exc: ProfileError) -> JSONResponse:
        return _answer(422, "invalid profile", str(exc), problems=exc)

    @app.exception_handler(UnknownProfile)
    async def unknown_profile(request: Request, exc: UnknownProfile) -> JSONResponse:
        return _answer(404, "unknown profile", f"no profile {exc}")

    @app.exception_handler(ProfileInUse)
    async def profile_in_use(request: Request, exc: ProfileInUse) -> JSONResponse:
        return _answer(409, "profile is active", f"profile {exc} is active; deactivate it first")

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        source = f"{request.method} {request.url.path}"
        found = [_request_problem(source, e) for e in exc.errors()[:MAX_REPORTED]]
        error = ProfileError(found, omitted=max(0, len(exc.errors()) - MAX_REPORTED))
        return _answer(422, "invalid request", str(error), problems=error)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        message = str(exc.detail)
        if isinstance(exc.__cause__, RecursionError):  # FastAPI's JSON body parse gave up
            message = "the body is nested too deep to read"
        headers = exc.headers
        if exc.status_code == 405 and (allowed := allowed_methods(request)) is not None:
            headers = {**(headers or {}), "Allow": allowed}
        return _answer(exc.status_code, phrase(exc.status_code).lower(), message, headers=headers)
