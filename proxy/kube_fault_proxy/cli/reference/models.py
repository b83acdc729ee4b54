"""Reference pages from the pydantic models: every field with its type, bounds, default and description."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from kube_fault_proxy.cli.reference import examples
from kube_fault_proxy.cli.reference.library import shipped_kinds
from kube_fault_proxy.cli.reference.markdown import code, page, table, text
from kube_fault_proxy.proxy.faults import KINDS, Fault, FaultSpec
from kube_fault_proxy.proxy.profiles import profile
from kube_fault_proxy.proxy.schema.strict import format_duration
from kube_fault_proxy.rig.invariants.catalogue import (
    CATALOGUE,
    CONDITION_INVARIANTS,
    CONTROLLER_INVARIANTS,
    FEATURE_INVARIANTS,
    STOP_INVARIANTS,
    Invariant,
)
from kube_fault_proxy.rig.runs import scenario

DURATION_PATTERN = r"^(\d+(\.\d+)?(ms|s|m|h))+$"
# (annotated_types class, how it reads, its attribute, the JSON Schema keys that say the same)
_BOUNDS = ((annotated_types.Ge, "≥ {}", "ge", ("minimum",)), (annotated_types.Gt, "> {}", "gt", ("exclusiveMinimum",)),
           (annotated_types.Le, "≤ {}", "le", ("maximum",)), (annotated_types.Lt, "< {}", "lt", ("exclusiveMaximum",)),
           (annotated_types.MinLen, "at least {} long", "min_length", ("minLength", "minItems")),
           (annotated_types.MaxLen, "at most {} long", "max_length", ("maxLength", "maxItems")))
_SCHEMA_BOUNDS = (("minimum", "≥ {}"), ("exclusiveMinimum", "> {}"), ("maximum", "≤ {}"), ("exclusiveMaximum", "< {}"),
                  ("minLength", "at least {} characters"), ("maxLength", "at most {} characters"),
                  ("minItems", "at least {} items"), ("maxItems", "at most {} items"))


def doc(model: type) -> str:
    """A model's docstring as one paragraph."""
    return " ".join((inspect.getdoc(model) or "").split())


def _is_duration(schema: dict[str, Any]) -> bool:
    return schema.get("pattern") == DURATION_PATTERN or any(_is_duration(s) for s in schema.get("anyOf", []))


def type_of(schema: dict[str, Any], links: dict[str, str]) -> str:
    """A JSON Schema as a reader says it: `integer`, `list of Selector`, `one of "a", "b"`, `duration`."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}]({links[name]})" if name in links else name
    if "anyOf" in schema:
        return " or ".join(type_of(s, links) for s in schema["anyOf"] if s.get("type") != "null")
    if "allOf" in schema and len(schema["allOf"]) == 1 and "type" not in schema:
        return type_of(schema["allOf"][0], links)
    if "const" in schema:
        return code(schema["const"])
    if "enum" in schema:
        return "one of " + ", ".join(code(v) for v in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        return "list of " + type_of(schema.get("items", {}), links)
    if kind == "object":
        extra = schema.get("additionalProperties")
        return "map to " + type_of(extra, links) if isinstance(extra, dict) else "object"
    if _is_duration(schema):
        return "duration (`250ms`, `10s`, `1m30s`, `1h`)"
    return str(kind or "any")


def bounds(info: FieldInfo, schema: dict[str, Any]) -> str:
    """The limits a value must keep, from its schema (union members and list items too) and, where the schema
    cannot say them (a duration is a string there), from the field's own constraints."""
    members = [schema, *schema.get("anyOf", [])]
    said = {key for member in members for key in member}
    found: list[str] = []
    for meta in info.metadata:
        for cls, form, attr, keys in _BOUNDS:
            if isinstance(meta, cls) and not said & set(keys):
                found.append(form.format(getattr(meta, attr)))
    for member in members:
        found += schema_bounds(member)
        if isinstance(member.get("items"), dict):
            found += [f"each {b}" for b in schema_bounds(member["items"])]
    return ", ".join(dict.fromkeys(found))


def schema_bounds(schema: dict[str, Any]) -> list[str]:
    """The limits a JSON Schema sets, as a reader says them."""
    found = [form.format(schema[key]) for key, form in _SCHEMA_BOUNDS if key in schema]
    found = ["not empty" if b == "at least 1 items" else b for b in found]
    pattern = schema.get("pattern")
    if pattern and pattern != DURATION_PATTERN:
        found.append(f"matches {code(pattern)}")
    return found


def default(info: FieldInfo, schema: dict[str, Any]) -> str:
    """The value an unset field takes, or `required`."""
    if info.default_factory is not None:
        value: Any = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "**required**"
    else:
        value = info.default
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "(all defaults)"
    if _is_duration(schema) and isinstance(value, int | float):
        return code(format_duration(float(value)))
    if isinstance(value, bool):
        return code(str(value).lower())
    if value == "":
        return "empty"
    return code(value if not isinstance(value, list | dict) else (value or "[]" if isinstance(value, list) else "{}"))


def fields(model: type[BaseModel]) -> Iterator[tuple[str, FieldInfo, dict[str, Any]]]:
    """Each field's name as written in a file, its info and its JSON Schema."""
    props = model.model_json_schema(by_alias=True)["properties"]
    for name, info in model.model_fields.items():
        key = info.alias or name
        yield key, info, props[key]


def field_table(model: type[BaseModel], links: dict[str, str]) -> str:
    """One row per field: name, type, bounds, default, description."""
    rows = [(code(key), type_of(schema, links), bounds(info, schema), default(info, schema),
             text(info.description or ""))
            for key, info, schema in fields(model)]
    return table(("field", "type", "bounds", "default", "description"), rows) if rows else "No settings.\n"


def section(model: type[BaseModel], links: dict[str, str], title: str | None = None, level: int = 2) -> str:
    """A heading, the model's docstring and its field table."""
    return f"{'#' * level} {title or model.__name__}\n\n{text(doc(model))}\n\n{field_table(model, links)}"


def nested(models: list[type[BaseModel]]) -> list[type[BaseModel]]:
    """The models the given ones hold (not themselves, not fault kinds), in first-seen order."""
    seen: dict[str, type[BaseModel]] = {}
    kinds = {k.__name__ for k in KINDS}
    for model in models:
        for info in model.model_fields.values():
            for arg in _model_args(info.annotation):
                if arg.__name__ not in kinds and arg not in models:
                    seen.setdefault(arg.__name__, arg)
    return list(seen.values())


def _model_args(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in getattr(annotation, "__args__", ()):
        yield from _model_args(arg)


def _searched(kind: type[FaultSpec]) -> str:
    """The kind's part of the search grammar, in words: its group, when it is drawn, what a shrink weakens it to."""
    drawn = "drawn unless `--kinds` says otherwise" if kind.searched_by_default else "drawn when named in `--kinds`"
    weaker = f"; a shrink tries {code(kind.weaker)} in its place" if kind.weaker else ""
    return f"{kind.search_group}: {drawn}{weaker}"


def _example(kind: str, shipped: list[str]) -> str:
    """A whole profile with one rule of the kind, and the shipped profiles that use it."""
    named = ", ".join(f"[{code(name)}](shipped.md)" for name in shipped) or "none"
    return (f"Example (a whole profile; `kube-fault-proxy profiles validate FILE` checks one):\n\n"
            f"```yaml\n{examples.profile(kind)}```\n\nShipped profiles that use it: {named}.\n")


def fault_kinds_page() -> str:
    """docs/reference/fault-kinds.md: every fault kind and its settings."""
    links = {m.__name__: f"#{m.__name__.lower()}" for m in KINDS}
    links |= {m.__name__: f"#{m.__name__.lower()}" for m in nested(list(KINDS))}
    sections = [table(("kind", "what it does", "in the fault search"),
                      [(f"[{code(k.kind)}](#{k.kind.lower()})", text(doc(k)), _searched(k)) for k in KINDS])]
    using = shipped_kinds()
    for kind in KINDS:
        sections.append(f"## {kind.kind}\n\n{text(doc(kind))} Written `{kind.kind}: {{…}}` under a rule's "
                        f"`fault`.\n\n{field_table(kind, links)}\n{_example(kind.kind, using.get(kind.kind, []))}")
    for model in nested(list(KINDS)):
        sections.append(section(model, links, model.__name__))
    return page("Fault kinds", "Each rule of a profile carries exactly one fault kind under `fault`. The settings "
                "below are checked strictly when a profile is loaded: an unknown key, a wrong type or a value out "
                "of bounds is an error naming `file:line:col` and the field path.", sections)


PROFILE_MODELS: list[type[BaseModel]] = [profile.FaultProfile, profile.Metadata, profile.Spec, profile.Rule,
                                         profile.Selector, profile.When, profile.Trigger]


def profile_page() -> str:
    """docs/reference/profile.md: the FaultProfile file format."""
    links = {m.__name__: f"#{m.__name__.lower()}" for m in PROFILE_MODELS} | {"Fault": "fault-kinds.md"}
    sections = [section(m, links) for m in PROFILE_MODELS]
    sections.append(f"## Fault\n\n{text(doc(Fault))} The kinds: "
                    + ", ".join(f"[{code(k.kind)}](fault-kinds.md#{k.kind.lower()})" for k in KINDS) + ".\n")
    return page("Fault profile format", "A fault profile is a Kubernetes-style YAML (or JSON) file: "
                "`apiVersion: kube-fault-proxy/v1`, `kind: FaultProfile`, `metadata` and `spec`. Durations carry "
                "their unit; numbers whose names end in `Seconds` are seconds. Globs use `*` and `?`; a list "
                "matches any of its entries.", sections)


SCENARIO_MODELS: list[type[BaseModel]] = [scenario.Scenario, scenario.ScenarioMeta, scenario.ScenarioSpec,
                                          scenario.ClusterSpec, scenario.LoadSpec, scenario.Step,
                                          scenario.KillApiserver, scenario.KillScheduler, scenario.NodeStep,
                                          scenario.FlapNode, scenario.ResizeNode, scenario.CreateForeignPods,
                                          scenario.DeletePod, scenario.StopScheduler, scenario.Settle,
                                          scenario.Expectation]


def promised(invariant: Invariant) -> str:
    """An invariant's upstream promise as a table cell: the quote, then where it is, linked."""
    where = invariant.promise.source
    if where.startswith("https://"):
        where = where.removeprefix("https://").split("#")[0].rstrip("/")
    quote = text(f'"{invariant.promise.quote}"')
    return f"{quote} ([{text(where)}]({invariant.promise.link}))"


def scenario_page() -> str:
    """docs/reference/scenario.md: the Scenario file format, the events a step waits for, the invariants."""
    links = {m.__name__: f"#{m.__name__.lower()}" for m in SCENARIO_MODELS}
    sections = [section(m, links) for m in SCENARIO_MODELS]
    sections.append("## Events a step may wait for (`onEvent`)\n\n" + ", ".join(code(e) for e in scenario.EVENTS)
                    + ".\n")
    sections.append("## Invariants (`expect.invariants`, `expect.mayBreak`)\n\nA scenario names an invariant by its "
                    "name or its alias. Each quotes the upstream promise it encodes.\n\n"
                    + table(("name", "alias", "holds when", "promised by"), [
                        (code(i.name), code(i.alias) if i.alias else "", text(i.meaning), promised(i))
                        for i in CATALOGUE]))
    sections.append("## Invariants of workload controllers and conditions\n\n`kube-fault-proxy check` also judges "
                    "these, on the cluster as it is (and the rig on a history recorded directly from the apiserver): "
                    "what kube-controller-manager's workload controllers promise, and the conditions a scheduler "
                    "must leave.\n\n" + table(("name", "holds when", "promised by"), [
                        (code(i.name), text(i.meaning), promised(i))
                        for i in (*CONTROLLER_INVARIANTS, *CONDITION_INVARIANTS)]))
    sections.append("## Invariants of DRA and gang scheduling\n\nWhat the dynamic-resources allocator and the gang "
                    "scheduling API promise (Kubernetes v1.37 and v1.38). A search trial with the `dra` shape judges "
                    "the DRA ones on its namespace; the cluster tests judge all four on a recorded history.\n\n"
                    + table(("name", "holds when", "promised by"), [
                        (code(i.name), text(i.meaning), promised(i)) for i in FEATURE_INVARIANTS]))
    sections.append("## Invariant of a run's graceful stops\n\nJudged from the run's own events, whenever the "
                    "scenario has a `stopScheduler` step: each stop's `scheduler-stopped` event carries its bound "
                    "(`within`) and `exitSeconds`, or `stopTimedOut`. A scenario's `expect` may name it. "
                    "`kube-fault-proxy check` does not judge it: a snapshot of the cluster holds no stop.\n\n"
                    + table(("name", "holds when", "promised by"), [
                        (code(i.name), text(i.meaning), promised(i)) for i in STOP_INVARIANTS]))
    return page("Scenario format", "A scenario (`kube-fault-proxy scenario run FILE`) names the cluster, the load, a "
                "fault timeline, how the run settles and what each scheduler's run must show. It is strict like a "
                "profile.", sections)


def undescribed() -> list[str]:
    """Every fault kind without a docstring and every profile or scenario field without a description."""
    missing = [f"fault kind {k.kind}" for k in KINDS if not doc(k)]
    missing += [f"fault kind {k.kind}: no example in cli/reference/examples.py" for k in KINDS
                if k.kind not in examples.RULES]
    every = [*KINDS, *nested(list(KINDS)), *PROFILE_MODELS, *SCENARIO_MODELS]
    for model in dict.fromkeys(every):
        missing += [f"{model.__name__}.{key}" for key, info, _ in fields(model) if not info.description]
    return missing
