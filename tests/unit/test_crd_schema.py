"""The CRDs: structural, generated from the profile model, and refusing what the loader refuses."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kube_fault_proxy.proxy.crd import API_VERSION
from kube_fault_proxy.proxy.crd.definitions import activation_crd, crds, crds_yaml, profile_crd
from kube_fault_proxy.proxy.crd.objects import (
    DESCRIPTION,
    activation_from_object,
    profile_from_object,
    profile_to_object,
)
from kube_fault_proxy.proxy.crd.schema import NotStructural, structural
from kube_fault_proxy.proxy.profiles.library import load_dir
from kube_fault_proxy.proxy.profiles.problems import ProfileError

from tests.support.crd_examples import REJECTED, apiserver_errors, pruned

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = [profile_to_object(e.profile) for e in load_dir(ROOT / "fault_profiles").values()]


def obj(spec: Any, name: str = "p", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": API_VERSION, "kind": "FaultProfile", "metadata": meta, "spec": spec}


def loader_problems(o: dict[str, Any]) -> list[str]:
    try:
        profile_from_object(pruned(o))
    except ProfileError as e:
        return [str(p) for p in e.problems]
    return []


def nodes(schema: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every schema node below (and including) this one that describes a value."""
    found = [(path, schema)]
    for name, sub in (schema.get("properties") or {}).items():
        found += nodes(sub, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            found += nodes(schema[key], f"{path}[{key}]")
    return found


@pytest.mark.parametrize("crd", [profile_crd(), activation_crd()], ids=["FaultProfile", "FaultActivation"])
def test_the_schema_is_structural(crd: dict[str, Any]) -> None:
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert "$ref" not in yaml.safe_dump(schema)
    for path, node in nodes(schema):
        assert "type" in node, path
        assert not ("properties" in node and "additionalProperties" in node), path
        assert node.get("additionalProperties") is not False, path
        for combinator in ("oneOf", "allOf"):
            for sub in node.get(combinator, []):
                assert set(sub) <= {"required", "pattern"}, (path, sub)
    assert not [p for p, n in nodes(schema) if n.get("x-kubernetes-preserve-unknown-fields")]


def test_deploy_holds_what_the_crds_command_prints() -> None:
    printed = subprocess.run([sys.executable, "-m", "kube_fault_proxy", "crds"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
    assert printed == crds_yaml() == (ROOT / "deploy" / "crds.yaml").read_text()
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(printed)] == [
        "faultprofiles.kube-fault-proxy.io", "faultactivations.kube-fault-proxy.io"]


@pytest.mark.parametrize(("spec", "said"), [pytest.param(s, m, id=i) for i, s, m in REJECTED])
def test_every_loader_refusal_is_a_schema_refusal(spec: dict[str, Any], said: str) -> None:
    o = obj(spec)
    assert any(said in p for p in loader_problems(o)), loader_problems(o)
    assert apiserver_errors(profile_crd(), o)


@pytest.mark.parametrize("o", SHIPPED, ids=[o["metadata"]["name"] for o in SHIPPED])
def test_shipped_profiles_pass_both_and_round_trip(o: dict[str, Any]) -> None:
    assert apiserver_errors(profile_crd(), o) == []
    profile = profile_from_object(o)
    assert profile_to_object(profile) == o
    assert profile.metadata.description == o["metadata"]["annotations"][DESCRIPTION]


def test_a_bad_object_name_is_refused_by_both() -> None:
    o = obj({}, name="Bad_Name")
    assert loader_problems(o) and apiserver_errors(profile_crd(), o)


def test_what_only_the_loader_checks_is_reported_not_refused() -> None:
    """Annotations and label keys are beyond a CRD schema: the apiserver takes them, the proxy's
    loader refuses them, and the proxy says so in the activation's status."""
    long_description = obj({}, annotations={DESCRIPTION: "x" * 4097})
    assert apiserver_errors(profile_crd(), long_description) == []
    assert loader_problems(long_description) == [
        "FaultProfile ns/p: metadata.description: String should have at most 4096 characters"]
    activation = {"apiVersion": API_VERSION, "kind": "FaultActivation", "metadata": {"name": "a", "namespace": "ns"},
                  "spec": {"profile": "p", "proxySelector": {"not a key!": "v"}}}
    assert apiserver_errors(activation_crd(), activation) == []
    with pytest.raises(ProfileError, match=r"spec\.proxySelector\.not a key!\.\[key\]: String should match pattern"):
        activation_from_object(activation)


@pytest.mark.parametrize(("spec", "said"), [
    ({}, "spec.profile: required field is missing"),
    ({"profile": "p", "ttlSeconds": 0}, "spec.ttlSeconds: Input should be greater than or equal to 1"),
    ({"profile": "p", "ttlSeconds": 1.5}, "spec.ttlSeconds: Input should be a valid integer"),
    ({"profile": "p", "seed": "7"}, "spec.seed: Input should be a valid integer"),
    ({"profile": "p", "proxySelector": {"pool": "not valid!"}}, "spec.proxySelector.pool: String should match"),
    ({"profile": "p", "proxySelector": ["pool"]}, "spec.proxySelector: Input should be a valid dictionary"),
    ({"profile": "P!"}, "spec.profile: String should match pattern"),
    ({"profile": "p", "colour": "red"}, "spec.colour: unknown field"),
])
def test_activation_refusals_are_schema_refusals(spec: dict[str, Any], said: str) -> None:
    activation = {"apiVersion": API_VERSION, "kind": "FaultActivation", "metadata": {"name": "a", "namespace": "ns"},
                  "spec": spec}
    with pytest.raises(ProfileError) as e:
        activation_from_object(activation)
    assert said in str(e.value)
    assert apiserver_errors(activation_crd(), activation)


@pytest.mark.parametrize(("node", "why"), [
    ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, "anyOf other than Optional"),
    ({"type": "string", "format": "uri", "contentEncoding": "base64"}, "keyword 'contentEncoding'"),
    ({"description": "no type"}, "a node without a type"),
    ({"type": "object", "patternProperties": {"a": {"type": "string"}, "b": {"type": "string"}}},
     "patternProperties other than a map"),
])
def test_what_a_structural_schema_cannot_hold_is_an_error(node: dict[str, Any], why: str) -> None:
    with pytest.raises(NotStructural, match=why):
        structural(node, {})


def test_integer_bounds_become_inclusive_and_int64_is_the_widest() -> None:
    assert structural({"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 2**63}, {}) == {
        "type": "integer", "minimum": 1}
    assert structural({"type": "number", "exclusiveMinimum": 0}, {}) == {
        "type": "number", "minimum": 0, "exclusiveMinimum": True}
    # le=INT64_MAX (the profile's counts): the apiserver reads the bound as float64, 2**63, and refuses it
    assert structural({"type": "integer", "minimum": 1, "maximum": 2**63 - 1}, {}) == {"type": "integer", "minimum": 1}
    assert structural({"type": "integer", "maximum": 2**63 - 300}, {}) == {"type": "integer"}
    assert structural({"type": "integer", "maximum": 2**62}, {}) == {"type": "integer", "maximum": 2**62}


def test_no_integer_bound_in_the_crds_is_one_the_apiserver_refuses() -> None:
    """kube-openapi checks each bound of an integer fits int64 once read as float64 (stop 51's CI)."""
    bounds = [(path, n[key]) for crd in crds() for path, n in nodes(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
              if n.get("type") == "integer" for key in ("minimum", "maximum") if key in n]
    assert bounds, "the CRDs bound some integers"
    assert [(path, b) for path, b in bounds if abs(float(b)) >= 2.0**63] == []


# --- property: on any mutation of a shipped profile, the schema and the loader agree -------------

def _fields(schema: dict[str, Any]) -> list[str]:
    return sorted({name for _, n in nodes(schema) for name in (n.get("properties") or {})})


SPEC_SCHEMA = profile_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
KEYS = [*_fields(SPEC_SCHEMA), "colour"]
VALUES: list[Any] = [
    None, True, False, 0, 1, -1, 2, 7, 32, 33, 64, 99, 256, 400, 500, 599, 600, 3600, 3601, 86400, 86401, 2**63,
    0.5, 1.5, -0.5, "", "x", "r", "r2", "R", "10s", "0s", "0.0s", "250ms", "1m30s", "10", "ms", "get", "watch",
    "bind", "pods", "binding", "ADDED", "UPDATED", "auto", "event", "none", "expired", "apf", "status", "close",
    "timeout", "reset", "request", "response", [], ["get"], [""], ["pods", "pods"], [1], {}, {"status": 500},
    {"seconds": 1}, {"abort": {"status": 500}}, {"reset": {}}, {"abort": {"status": 500}, "reset": {}},
    {"afterEvents": 1}, {"afterSeconds": 5}, {"match": {}, "count": 1}, {"name": "r", "fault": {"reset": {}}},
    [{"name": "r", "fault": {"reset": {}}}], [{"name": "r", "fault": {"reset": {}}}] * 2,
]


def _slots(data: Any) -> list[tuple[Any, Any]]:
    """Every (container, key or index) in a document."""
    found: list[tuple[Any, Any]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            found.append((data, key))
            found += _slots(value)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            found.append((data, i))
            found += _slots(value)
    return found


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    o = copy.deepcopy(draw(st.sampled_from(SHIPPED)))
    for _ in range(draw(st.integers(1, 3))):
        containers = [o["spec"]] + [c for c, k in _slots(o["spec"]) if isinstance(c[k], dict | list)]
        slots = _slots(o["spec"])
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "add" or not slots:
            container = draw(st.sampled_from(containers))
            value = copy.deepcopy(draw(st.sampled_from(VALUES)))
            container = container if isinstance(container, dict | list) else o["spec"]
            if isinstance(container, dict):
                container[draw(st.sampled_from(KEYS))] = value
            else:
                container.append(value)
        else:
            container, key = draw(st.sampled_from(slots))
            if action == "delete":
                del container[key]
            else:
                container[key] = copy.deepcopy(draw(st.sampled_from(VALUES)))
    return o


@settings(max_examples=400, deadline=None, database=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow])  # print_blob: a failure prints how to replay it
@given(mutated())
def test_schema_and_loader_agree_on_mutated_profiles(o: dict[str, Any]) -> None:
    by_loader = loader_problems(o)
    by_schema = apiserver_errors(profile_crd(), o)
    assert bool(by_loader) == bool(by_schema), (o["spec"], by_loader, by_schema)
