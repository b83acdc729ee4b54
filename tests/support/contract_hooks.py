"""schemathesis hooks for the contract test (SCHEMATHESIS_HOOKS): the rules the served document can state
only in prose (PUT /v1/profiles/{name} says them), applied to the requests generated as valid."""

from __future__ import annotations

from typing import Any

import schemathesis

PUT_PROFILE = ("PUT", "/v1/profiles/{name}")


def _whole_numbers(value: Any) -> Any:
    """7.0 as 7: a profile is YAML even when sent as JSON, and YAML's 7.0 is a float, refused for an integer."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _whole_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(v) for v in value]
    return value


def _unique(names: list[Any]) -> list[Any]:
    """The same names, a repeated one replaced by one not yet taken (still a valid rule name)."""
    seen: set[Any] = set()
    out = []
    for i, name in enumerate(names):
        while name in seen:
            name = f"r{i}-{len(seen)}"
            i += 1
        seen.add(name)
        out.append(name)
    return out


@schemathesis.hook
def before_call(ctx: Any, case: schemathesis.Case, **kwargs: Any) -> None:
    """A valid profile upload: metadata.name is the name in the URL, no two rules share a name, and
    integers are written as integers."""
    meta = case.meta
    if (case.operation.method.upper(), case.operation.path) != PUT_PROFILE or meta is None:
        return
    if not meta.generation.mode.is_positive or not isinstance(case.body, dict):
        return
    case.body = body = _whole_numbers(case.body)
    if isinstance(body.get("metadata"), dict):
        body["metadata"]["name"] = (case.path_parameters or {}).get("name")
    rules = body.get("spec", {}).get("rules") if isinstance(body.get("spec"), dict) else None
    if isinstance(rules, list) and all(isinstance(r, dict) and "name" in r for r in rules):
        for rule, name in zip(rules, _unique([r["name"] for r in rules]), strict=True):
            rule["name"] = name
