"""The served OpenAPI document says what the server does: methods, bounds, security in each mode, the feed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient
from kube_fault_proxy.proxy.control.app import build_app
from kube_fault_proxy.proxy.control.feed import Sampler, sse
from kube_fault_proxy.proxy.runtime import Runtime

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s3cret"


def document(runtime: Runtime, token: str | None) -> dict[str, Any]:
    c = TestClient(build_app(runtime, {}, token=token))
    doc: dict[str, Any] = c.get("/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    return doc


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("OPTIONS", "/v1/active", "DELETE, GET, PUT"),
        ("POST", "/v1/active", "DELETE, GET, PUT"),
        ("PATCH", "/v1/profiles/bind-fail-30pct", "DELETE, GET, PUT"),
        ("DELETE", "/v1/stats", "GET"),
        ("TRACE", "/v1/events/stream", "GET"),
        ("PUT", "/healthz", "GET"),
    ],
)
def test_a_405_allows_every_method_served_on_the_path(runtime: Runtime, method: str, path: str, allow: str) -> None:
    r = TestClient(build_app(runtime, {})).request(method, path)
    assert (r.status_code, r.headers["allow"]) == (405, allow)
    assert r.json()["error"] == "method not allowed"


@pytest.mark.parametrize(
    ("seed", "status"),
    [(7, 200), (7.0, 200), (0, 200), (2**63 - 1, 200), (2**63, 422), (9223372036854775998, 422), (-1, 422),
     (7.5, 422), (False, 422)],
    ids=["int", "whole-float", "zero", "largest", "2**63", "past-2**63", "negative", "fraction", "bool"],
)
def test_a_seed_is_taken_exactly_as_the_document_bounds_it(runtime: Runtime, seed: object, status: int) -> None:
    c = TestClient(build_app(runtime, {}))
    r = c.put("/v1/active", json={"profile": "bind-fail-30pct", "seed": seed})
    assert r.status_code == status, r.text
    bound = document(runtime, None)["components"]["schemas"]["ActivateRequest"]["properties"]["seed"]["anyOf"][0]
    assert bound == {"type": "integer", "minimum": 0, "exclusiveMaximum": 2**63}
    assert all(type(v) is int for k, v in bound.items() if k != "type")  # exact, not 9.223372036854776e18


@pytest.mark.parametrize(("token", "anonymous"), [(None, True), (TOKEN, False)], ids=["no-token", "token"])
def test_credentials_are_required_only_with_a_token(runtime: Runtime, token: str | None, anonymous: bool) -> None:
    doc = document(runtime, token)
    operations = [(p, m, op) for p, item in doc["paths"].items() for m, op in item.items()]
    secured = [(p, m, op["security"]) for p, m, op in operations if op.get("security")]
    assert {p for p, _, _ in secured} == {p for p, _, _ in operations} - {"/healthz"}
    assert all(({} in security) is anonymous for _, _, security in secured)
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def test_the_feed_is_declared_event_by_event_and_its_frames_match(runtime: Runtime) -> None:
    doc = document(runtime, None)
    stream = doc["paths"]["/v1/events/stream"]["get"]["responses"]["200"]["content"]["text/event-stream"]
    assert stream["schema"] == {"type": "string"}
    event = stream["itemSchema"]
    assert event["properties"]["event"] == {"enum": ["snapshot", "tick"]}
    assert event["properties"]["data"]["contentMediaType"] == "application/json"
    frame_schema = doc["components"]["schemas"]["FeedFrame"]
    sampler = Sampler(runtime)
    runtime.activations.activate("bind-fail-30pct", 1)
    snapshot = {**sampler.sample(), "journal": sampler.recent(), "journalSkipped": 0, "interval": 0.5}
    for frame in (snapshot, sampler.sample()):
        jsonschema.validate(frame, frame_schema)
        assert sse("tick", frame["seq"], frame).startswith(b"event: tick\nid: ")
