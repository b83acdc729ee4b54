"""The control API's reference from its OpenAPI document, and the Prometheus families from the collector."""

from __future__ import annotations

from typing import Any

from kube_fault_proxy.cli.reference.markdown import code, page, table, text
from kube_fault_proxy.cli.reference.models import schema_bounds
from kube_fault_proxy.proxy.control.app import build_app
from kube_fault_proxy.proxy.control.metrics import registry_for
from kube_fault_proxy.proxy.control.openapi import UNGUARDED_401
from kube_fault_proxy.proxy.journal import Journal
from kube_fault_proxy.proxy.profiles.library import Library
from kube_fault_proxy.proxy.runtime import Runtime

METHODS = ("get", "put", "post", "delete", "patch")


def idle_runtime() -> Runtime:
    """A runtime with no profiles and no journal file: enough to build the app and the collector, no sockets."""
    return Runtime(Library(), Journal(None, wall=lambda: 0.0), lambda: 0.0, lambda: 0.0)


def openapi() -> dict[str, Any]:
    """The control plane's OpenAPI document, as `/openapi.json` serves it."""
    return build_app(idle_runtime(), {}).openapi()


def operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """Every (method, path, operation) the document declares, in its order."""
    return [(m.upper(), path, op) for path, ops in doc["paths"].items() for m, op in ops.items() if m in METHODS]


def _schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " or ".join(_schema_name(s) for s in schema["anyOf"])
    return str(schema.get("type", "object"))


def _first_sentence(op: dict[str, Any]) -> str:
    words = str(op.get("description") or op.get("summary") or "")
    return words.split(". ", 1)[0].split("; ", 1)[0].rstrip(".")


def _anchor(method: str, path: str) -> str:
    """The heading's id as MkDocs' table of contents makes it (lowercase, punctuation dropped, spaces to -)."""
    slug = "".join(c for c in f"{method} {path}".lower() if c.isalnum() or c in " -_")
    return "-".join(slug.split())


def parameter_description(param: dict[str, Any]) -> str:
    """What a parameter means, where FastAPI put it (on the parameter, or on its schema)."""
    return str(param.get("description") or param.get("schema", {}).get("description") or "")


def undescribed_parameters(doc: dict[str, Any]) -> list[str]:
    """Every parameter of a route with no description, as `GET /v1/journal limit`."""
    return [f"{m} {p} {param['name']}" for m, p, op in operations(doc) for param in op.get("parameters", [])
            if not parameter_description(param)]


def _default(schema: dict[str, Any]) -> str:
    return code(schema["default"]) if "default" in schema else ("**required**" if schema else "")


def _operation(method: str, path: str, op: dict[str, Any]) -> str:
    parts = [f"### {method} {path}\n\n{text(op.get('description') or op.get('summary') or '')}\n"]
    params = [(code(p["name"]), p["in"], text(_schema_name(p.get("schema", {}))),
               ", ".join(schema_bounds(p.get("schema", {}))),
               "**required**" if p.get("required") else _default(p.get("schema", {})),
               text(parameter_description(p)))
              for p in op.get("parameters", [])]
    if params:
        parts.append(table(("parameter", "in", "type", "bounds", "default", "description"), params))
    body = op.get("requestBody", {}).get("content", {})
    if body:
        kinds = ", ".join(f"{code(ct)} ({text(_schema_name(c.get('schema', {})))})" for ct, c in body.items())
        parts.append(f"Body: {kinds}.\n")
    answers = [(code(status), text(answer.get("description", "")))
               for status, answer in sorted(op.get("responses", {}).items())
               if answer.get("description") != UNGUARDED_401]  # said once, in the page's introduction
    parts.append(table(("status", "meaning"), answers))
    return "\n".join(parts)


def api_page() -> str:
    """docs/reference/control-api.md."""
    doc = openapi()
    ops = operations(doc)
    sections = [table(("call", "does", "token"),
                      [(f"[{code(f'{m} {p}')}](#{_anchor(m, p)})", text(_first_sentence(op)),
                        "when set" if op.get("security") else "never") for m, p, op in ops])]
    by_tag: dict[str, list[str]] = {}
    for method, path, op in ops:
        by_tag.setdefault((op.get("tags") or ["other"])[0], []).append(_operation(method, path, op))
    sections += [f"## {tag}\n\n" + "\n".join(items) for tag, items in by_tag.items()]
    schemas = doc.get("components", {}).get("schemas", {})
    sections.append("## Schemas\n\nThe document defines " + ", ".join(code(n) for n in sorted(schemas)) + ". The "
                    "profile's own are described field by field in [Fault profile format](profile.md) and "
                    "[Fault kinds](fault-kinds.md).\n")
    return page("Control API", f"{text(doc['info'].get('description', ''))} JSON over HTTP on `127.0.0.1:7080` by "
                "default; the live document is at `/openapi.json`, browsable at `/docs` and `/redoc`. Every refusal "
                "(4xx) has one JSON shape, `ErrorBody`. When `serve` runs with a control token (`--control-token` or "
                "`KFP_CONTROL_TOKEN`), a call whose **token** column says \"when set\" answers `401` Unauthorized "
                "without `Authorization: Bearer TOKEN`; without a token no call answers 401, so the calls below do not "
                "list it.", sections)


def metric_families() -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(name as exposed, type, help, labels) of every family `/metrics` serves."""
    families = []
    for metric in registry_for(idle_runtime()).collect():
        name = f"{metric.name}_total" if metric.type == "counter" else metric.name
        labels = tuple(getattr(metric, "_labelnames", ())) or tuple(
            sorted({k for s in metric.samples for k in s.labels}))
        families.append((name, metric.type, metric.documentation, labels))
    return families


def metrics_page() -> str:
    """docs/reference/metrics.md."""
    rows = [(code(name), kind, ", ".join(code(label) for label in labels), text(doc))
            for name, kind, doc, labels in metric_families()]
    return page("Prometheus metrics", "`GET /metrics` serves these in the Prometheus text format (0.0.4), or "
                "OpenMetrics 1.0 when the scraper's `Accept` header asks for it. The proxy's own families (`kfp_*`) "
                "are read from its counters at scrape time; the process and Python families come from the official "
                "client's standard collectors (Linux `/proc`).", [table(("metric", "type", "labels", "meaning"), rows)])
