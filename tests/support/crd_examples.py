"""Profiles the loader refuses, as FaultProfile object specs, and how the apiserver validates an object
against a CRD schema (for the unit tests; the cluster tests send the same examples to a real one)."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema

INT64 = 2**63 - 1

# (id, spec, what the loader says): each is refused by the loader and must be refused by the schema.
REJECTED: list[tuple[str, dict[str, Any], str]] = [
    ("unknown-key", {"rules": [{"name": "r", "fault": {"abort": {"status": 500}}, "colour": "red"}]},
     "spec.rules[0].colour: unknown field"),
    ("out-of-range", {"rules": [{"name": "r", "fault": {"abort": {"status": 700}}}]},
     "spec.rules[0].fault.abort.status: Input should be less than or equal to 599"),
    ("two-kinds", {"rules": [{"name": "r", "fault": {"abort": {"status": 500}, "delay": {"seconds": 1}}}]},
     "spec.rules[0].fault: a fault needs exactly one kind of"),
    ("no-kind", {"rules": [{"name": "r", "fault": {}}]}, "spec.rules[0].fault: a fault needs exactly one kind of"),
    ("missing-name", {"rules": [{"fault": {"reset": {}}}]}, "spec.rules[0].name: required field is missing"),
    ("unitless-duration", {"rules": [{"name": "r", "when": {"after": 10}, "fault": {"reset": {}}}]},
     "spec.rules[0].when.after: a duration needs a unit"),
    ("bad-duration", {"rules": [{"name": "r", "when": {"for": "10 s"}, "fault": {"reset": {}}}]},
     "spec.rules[0].when.for: not a duration"),
    ("zero-window", {"rules": [{"name": "r", "when": {"for": "0s"}, "fault": {"reset": {}}}]},
     "for must be longer than zero"),
    ("string-for-number", {"rules": [{"name": "r", "probability": "0.5", "fault": {"reset": {}}}]},
     "spec.rules[0].probability: Input should be a valid number"),
    ("bool-for-integer", {"rules": [{"name": "r", "when": {"every": True}, "fault": {"reset": {}}}]},
     "spec.rules[0].when.every: Input should be a valid integer"),
    ("bad-verb", {"rules": [{"name": "r", "match": {"verbs": ["bind"]}, "fault": {"reset": {}}}]},
     "spec.rules[0].match.verbs[0]: Input should be"),
    ("empty-selector-list", {"rules": [{"name": "r", "match": {"resources": []}, "fault": {"reset": {}}}]},
     "spec.rules[0].match.resources: List should have at least 1 item"),
    ("duplicate-rule", {"rules": [{"name": "r", "fault": {"reset": {}}}, {"name": "r", "fault": {"reset": {}}}]},
     "spec: rule name 'r' is used twice"),
    ("bad-rule-name", {"rules": [{"name": "R_1", "fault": {"reset": {}}}]},
     "spec.rules[0].name: String should match pattern"),
    ("commit-then-fail-empty", {"rules": [{"name": "r", "fault": {"commitThenFail": {}}}]},
     "commitThenFail needs exactly one of abort, reset, hang"),
    ("commit-then-fail-two", {"rules": [{"name": "r", "fault": {"commitThenFail": {"reset": {}, "hang": {}}}}]},
     "commitThenFail needs exactly one of abort, reset, hang"),
    ("apf-retry-after-bound", {"rules": [{"name": "r", "fault": {"throttle": {"retryAfterSeconds": 60}}}]},
     "spec.rules[0].fault.throttle.retryAfterSeconds: Input should be less than or equal to 32"),
    ("trigger-count-missing",
     {"rules": [{"name": "r", "when": {"trigger": {"match": {"verbs": ["create"]}}}, "fault": {"reset": {}}}]},
     "spec.rules[0].when.trigger.count: required field is missing"),
    ("negative-seed", {"seed": -1}, "spec.seed: Input should be greater than or equal to 0"),
    ("seed-past-int64", {"seed": 2**63}, "spec.seed: Input should be less than"),
    ("cut-neither", {"rules": [{"name": "r", "fault": {"cut": {}}}]}, "cut needs exactly one of afterEvents, afterSeconds"),
    ("cut-both", {"rules": [{"name": "r", "fault": {"cut": {"afterEvents": 1, "afterSeconds": 2}}}]},
     "cut needs exactly one of afterEvents, afterSeconds"),
    ("bad-event-type", {"rules": [{"name": "r", "fault": {"dropEvents": {"events": {"types": ["UPDATED"]}}}}]},
     "spec.rules[0].fault.dropEvents.events.types[0]: Input should be"),
    ("outage-seconds-missing", {"rules": [{"name": "r", "fault": {"outage": {}}}]},
     "spec.rules[0].fault.outage.seconds: required field is missing"),
    ("delay-zero", {"rules": [{"name": "r", "fault": {"delay": {"seconds": 0}}}]},
     "spec.rules[0].fault.delay.seconds: Input should be greater than 0"),
    ("reset-upstream-field", {"rules": [{"name": "r", "fault": {"resetUpstream": {"now": True}}}]},
     "spec.rules[0].fault.resetUpstream.now: unknown field"),
    ("too-many-rules", {"rules": [{"name": f"r{i}", "fault": {"reset": {}}} for i in range(257)]},
     "spec.rules: List should have at most 256 items"),
]


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema as the apiserver applies it with fieldValidation=Strict (kubectl's default): an
    unknown field is an error wherever the schema lists the fields."""
    out = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(out)
    out["properties"]["metadata"].pop("additionalProperties")  # ObjectMeta is the apiserver's own
    return out


def pruned(data: Any) -> Any:
    """Null fields dropped, as the apiserver drops them (no field of ours is nullable)."""
    if isinstance(data, dict):
        return {k: pruned(v) for k, v in data.items() if v is not None}
    if isinstance(data, list):
        return [pruned(v) for v in data]
    return data


def _beyond_schema(schema: dict[str, Any], data: Any, path: str) -> list[str]:
    """What the apiserver checks besides JSON Schema: list-map keys unique, integers within int64."""
    found: list[str] = []
    if isinstance(data, bool):
        return found
    if isinstance(data, int) and abs(data) > INT64:
        found.append(f"{path}: an integer beyond int64")
    if isinstance(data, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, value in data.items():
            sub = props.get(key) or (extra if isinstance(extra, dict) else None)
            if sub is not None:
                found += _beyond_schema(sub, value, f"{path}.{key}")
    if isinstance(data, list) and isinstance(schema.get("items"), dict):
        if schema.get("x-kubernetes-list-type") == "map":
            keys = [repr(tuple(item.get(k) for k in schema["x-kubernetes-list-map-keys"]))
                    for item in data if isinstance(item, dict)]
            if len(keys) != len(set(keys)):
                found.append(f"{path}: Duplicate value")
        for i, item in enumerate(data):
            found += _beyond_schema(schema["items"], item, f"{path}[{i}]")
    return found


def apiserver_errors(crd: dict[str, Any], obj: Any) -> list[str]:
    """Why the apiserver would refuse an object of this CRD (kubectl apply, strict field validation)."""
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    data = pruned(obj)
    validator = jsonschema.Draft4Validator(_strict(schema))
    errors = [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(data)]
    return errors + _beyond_schema(schema, data, "")
