"""Structural OpenAPI v3 schemas for the CRDs, generated from the project's own pydantic models.

A CRD schema must be structural: no `$ref`, a type on every node, no `additionalProperties`
beside `properties`, and inside `oneOf`/`allOf` only value checks. pydantic's JSON Schema is
turned into that shape here; a keyword this module does not know is an error, so a model change
cannot slip something the apiserver would refuse (or silently ignore) into the CRDs. Unknown
fields are not forbidden by the schema (structural schemas cannot say so): the apiserver prunes
them, and refuses them when asked to validate strictly, which kubectl does by default.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

Schema = dict[str, Any]

# Kept as they are; the x-kubernetes-* extensions too.
_KEPT = {"type", "description", "required", "enum", "pattern", "format", "minimum", "maximum",
         "minLength", "maxLength", "minItems", "maxItems", "exclusiveMinimum", "exclusiveMaximum"}
_DROPPED = {"title", "default", "example", "examples"}
# What a structural schema cannot say, and the loader checks alone: the shape of map keys (label
# keys; a CRD schema has no propertyNames or patternProperties, so the values' schema becomes
# additionalProperties). An object that breaks it is accepted by the apiserver and reported in status.
_LOADER_ONLY = {"propertyNames"}
_NULL = {"type": "null"}


def _past_int64(bound: int) -> bool:
    """The apiserver reads a bound as a float64 and refuses, for an integer, one that float64 rounds
    past int64 ("Maximum boundary value must be of type integer (default format)"): 2**63 - 1 and the
    few hundred below it become 2**63."""
    return abs(float(bound)) >= 2.0**63


class NotStructural(ValueError):
    """The model's JSON Schema has something a structural CRD schema cannot hold."""


def _resolve(node: Schema, defs: Schema) -> Schema:
    """Inline a $ref and collapse Optional (anyOf [X, null]) into X, keeping the outer annotations."""
    while True:
        if "$ref" in node:
            target = defs[node["$ref"].rsplit("/", 1)[-1]]
            node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        elif "anyOf" in node:
            options = [o for o in node["anyOf"] if o != _NULL]
            if len(options) != 1 or len(options) == len(node["anyOf"]):
                raise NotStructural(f"anyOf other than Optional[X]: {node['anyOf']}")
            node = {**options[0], **{k: v for k, v in node.items() if k != "anyOf"}}
        else:
            return node


def structural(node: Schema, defs: Schema, inside_combinator: bool = False) -> Schema:
    """One node of pydantic's JSON Schema as a structural OpenAPI v3 schema."""
    node = _resolve(node, defs)
    out: Schema = {}
    for key, value in node.items():
        if key in _DROPPED or key in _LOADER_ONLY:
            continue
        if key == "additionalProperties":
            if isinstance(value, dict):
                out[key] = structural(value, defs)
            # False: unknown fields are pruned (or refused under strict field validation).
        elif key == "patternProperties":
            if len(value) != 1 or "properties" in node:
                raise NotStructural(f"patternProperties other than a map's keys: {value}")
            out["additionalProperties"] = structural(next(iter(value.values())), defs)
        elif key == "properties":
            out[key] = {name: structural(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out[key] = structural(value, defs)
        elif key in ("oneOf", "allOf"):
            out[key] = [structural(sub, defs, inside_combinator=True) for sub in value]
        elif key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            # JSON Schema 2020-12's number form; OpenAPI v3.0 (and so the apiserver) wants the bound and
            # a flag, and for an integer the inclusive bound reads best (and fits int64: 2**63 does not).
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            if node.get("type") == "integer" and isinstance(value, int):
                out[bound] = value + 1 if bound == "minimum" else value - 1
                if _past_int64(out[bound]):  # the apiserver holds integers as int64 and refuses a
                    del out[bound]  # bound it cannot hold as such: int64 is the bound
            else:
                out[bound] = value
                out[key] = True
        elif key in ("minimum", "maximum") and node.get("type") == "integer" and _past_int64(value):
            continue  # le=INT64_MAX: int64 is the bound, and the apiserver refuses this one itself
        elif key in _KEPT or key.startswith("x-kubernetes-"):
            out[key] = value
        else:
            raise NotStructural(f"keyword {key!r} has no place in a CRD schema")
    if not inside_combinator and "type" not in out:
        raise NotStructural(f"a node without a type: {node}")
    if "enum" in out and out.get("type") is None and not inside_combinator:
        raise NotStructural(f"an enum without a type: {node}")
    return out


def model_schema(model: type[BaseModel]) -> Schema:
    """A pydantic model (by alias, as validated) as a structural schema."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    return structural(raw, defs)
