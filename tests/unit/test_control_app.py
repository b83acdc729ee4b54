"""The control plane's HTTP contract, driven in-process (no sockets)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from kube_fault_proxy import __version__
from kube_fault_proxy.proxy.control import parsing
from kube_fault_proxy.proxy.control.app import build_app
from kube_fault_proxy.proxy.profiles.loader import LIMITS, load_text
from kube_fault_proxy.proxy.profiles.profile import FaultProfile
from kube_fault_proxy.proxy.runtime import Runtime

from tests.support.builders import bind

ROOT = Path(__file__).resolve().parents[2]
GOOD = """apiVersion: kube-fault-proxy/v1
kind: FaultProfile
metadata: {name: mine}
spec:
  rules:
    - name: r
      match: {verbs: [create], subresources: [binding]}
      fault: {abort: {status: 503}}
"""


@pytest.fixture
def client(runtime: Runtime) -> TestClient:
    return TestClient(build_app(runtime, {"proxyUrl": "https://127.0.0.1:1"}))


def test_healthz(client: TestClient) -> None:
    body = client.get("/healthz").json()
    assert body["ok"] is True and body["active"] is None and body["proxyUrl"] == "https://127.0.0.1:1"


def test_openapi_is_served(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert {"/v1/profiles", "/v1/profiles/{name}", "/v1/active", "/v1/stats", "/v1/journal",
            "/metrics", "/healthz"} <= set(paths)


def test_activate_switch_deactivate(client: TestClient, runtime: Runtime) -> None:
    got = client.put("/v1/active", json={"profile": "bind-fail-30pct", "seed": 5, "ttlSeconds": 60})
    assert got.status_code == 200
    assert got.json()["profile"] == "bind-fail-30pct" and got.json()["seed"] == 5
    assert 59 < got.json()["remainingSeconds"] <= 60
    assert client.put("/v1/active", json={"profile": "bind-slow"}).json()["epoch"] == 2
    assert runtime.activations.active is not None and runtime.activations.active.engine.profile.name == "bind-slow"
    assert client.delete("/v1/active").json() == {"deactivated": "bind-slow", "profile": None,
                                                  "epoch": 2}


@pytest.mark.parametrize(
    ("body", "status"),
    [({"profile": "nope"}, 404), ({"profile": "pass-through", "ttlSeconds": 0}, 422),
     ({"profile": "pass-through", "colour": 1}, 422), ({}, 422)],
)
def test_bad_activation_keeps_the_old_profile(
    client: TestClient, runtime: Runtime, body: dict[str, object], status: int
) -> None:
    client.put("/v1/active", json={"profile": "bind-slow"})
    assert client.put("/v1/active", json=body).status_code == status
    assert client.get("/v1/active").json()["profile"] == "bind-slow"


def test_put_profile_yaml_then_json_and_read_back(client: TestClient) -> None:
    r = client.put("/v1/profiles/mine", content=GOOD, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 200 and r.json()["replaced"] is False and r.json()["source"] == "api"
    as_json = client.get("/v1/profiles/mine").json()
    assert as_json["spec"]["rules"][0]["fault"] == {"abort": {"status": 503}}
    r = client.put("/v1/profiles/mine", json=as_json)
    assert r.status_code == 200 and r.json()["replaced"] is True
    assert "kind: FaultProfile" in client.get("/v1/profiles/mine",
                                              headers={"Accept": "application/yaml"}).text


def test_invalid_profile_is_422_with_the_cli_message_and_changes_nothing(
    client: TestClient, runtime: Runtime
) -> None:
    client.put("/v1/profiles/mine", content=GOOD)
    client.put("/v1/active", json={"profile": "mine"})
    bad = GOOD.replace("status: 503", "status: 700")
    r = client.put("/v1/profiles/mine", content=bad)
    assert r.status_code == 422
    body = r.json()
    assert body["message"] == ("PUT /v1/profiles/mine:8:31: spec.rules[0].fault.abort.status: "
                               "Input should be less than or equal to 599")
    assert body["problems"][0]["line"] == 8 and body["problems"][0]["column"] == 31
    # the stored and the active profile are the old ones
    assert client.get("/v1/profiles/mine").json()["spec"]["rules"][0]["fault"]["abort"]["status"] == 503
    d = runtime.decide(bind("p"))
    assert d is not None and d.plan.before[0].reply.status == 503  # type: ignore[union-attr]


def test_name_mismatch_is_refused(client: TestClient) -> None:
    r = client.put("/v1/profiles/other", content=GOOD)
    assert r.status_code == 422 and "does not match the name in the URL" in r.json()["message"]


def test_delete_profile(client: TestClient) -> None:
    client.put("/v1/active", json={"profile": "bind-slow"})
    assert client.delete("/v1/profiles/bind-slow").status_code == 409
    assert client.delete("/v1/profiles/pass-through").status_code == 200
    assert client.get("/v1/profiles/pass-through").status_code == 404
    assert client.delete("/v1/profiles/pass-through").status_code == 404


def test_stats_journal_and_metrics(client: TestClient, runtime: Runtime) -> None:
    client.put("/v1/profiles/mine", content=GOOD)
    client.put("/v1/active", json={"profile": "mine"})
    for pod in ("a", "b"):
        ident = bind(pod)
        d = runtime.decide(ident)
        assert d is not None
        runtime.counters.performed(d, ident, action="respond 503")
    stats = client.get("/v1/stats").json()
    assert stats["injectionsTotal"] == 2 and stats["rules"]["r"]["matched"] == 2
    page = client.get("/v1/journal", params={"since": 0, "limit": 2}).json()
    assert [r["event"] for r in page["records"]] == ["activate", "inject"]
    rest = client.get("/v1/journal", params={"since": page["next"]}).json()
    assert [r["request"]["name"] for r in rest["records"]] == ["b"]
    metrics = client.get("/metrics").text
    # prometheus_client writes sample values as floats
    assert '\nkfp_injections_total{fault="abort",profile="mine",rule="r"} 2.0\n' in metrics
    assert '\nkfp_active_profile{profile="mine"} 1.0\n' in metrics
    assert client.post("/v1/stats/reset").json()["injectionsTotal"] == 0
    assert 'kfp_injections_total{fault="abort",profile="mine",rule="r"} 2.0' in client.get("/metrics").text


def test_token_guards_everything_but_healthz(runtime: Runtime) -> None:
    c = TestClient(build_app(runtime, {}, token="s3cret"))
    assert c.get("/healthz").status_code == 200
    assert c.get("/v1/active").status_code == 401
    assert c.get("/v1/active", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert c.get("/v1/active", headers={"Authorization": "Bearer s3cret"}).status_code == 200


@pytest.mark.parametrize(
    "body",
    [{"profile": "pass-through", "seed": False}, {"profile": "pass-through", "seed": "7"},
     {"profile": "pass-through", "seed": 1.5}, {"profile": "pass-through", "ttlSeconds": "60"},
     {"profile": 7}, {"profile": "pass-through", "extra": None}],
    ids=["seed-false", "seed-string", "seed-float", "ttl-string", "profile-number", "unknown-key"],
)
def test_activation_is_strict(client: TestClient, body: dict[str, object]) -> None:
    r = client.put("/v1/active", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "invalid request" and r.json()["message"].startswith("PUT /v1/active: body")
    assert client.get("/v1/active").json()["profile"] is None


def test_bad_json_names_the_problem(client: TestClient) -> None:
    r = client.put("/v1/active", content="{", headers={"Content-Type": "application/json"})
    assert r.status_code == 422
    assert r.json()["message"] == ("PUT /v1/active: body: not valid JSON at character 1: "
                                   "Expecting property name enclosed in double quotes")
    deep = client.put("/v1/active", content="[" * 100_000 + "]" * 100_000,
                      headers={"Content-Type": "application/json"})
    assert deep.status_code == 400 and deep.json()["message"] == "the body is nested too deep to read"


def test_bodies_over_the_limit_are_413(client: TestClient) -> None:
    big = "#" * (LIMITS.max_bytes + 1)
    for r in (client.put("/v1/profiles/mine", content=big), client.put("/v1/active", content=big),
              client.put("/v1/profiles/mine", content=iter([big[:1000].encode(), big[1000:].encode()]))):  # chunked
        assert r.status_code == 413, r.text
        assert r.json() == {"error": "content too large", "message": "the request body is larger than 262,144 bytes"}
    assert client.get("/v1/profiles/mine").status_code == 404


def test_hostile_profiles_are_422_naming_the_problem(client: TestClient) -> None:
    bomb = "a0: &a0 lol\n" + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10))
    cases = {
        bomb + "spec: *a9\n": "PUT /v1/profiles/mine:2:50: refused: more than 8 aliases",
        GOOD.replace("seed", "x") + "\x00": "PUT /v1/profiles/mine:9:1: character U+0000 is not allowed in YAML",
        GOOD.replace("rules:", "seed: " + "9" * 5000 + "\n  rules:"):
            "PUT /v1/profiles/mine:5:9: spec.seed: integer longer than 64 digits",
    }
    for text, message in cases.items():
        r = client.put("/v1/profiles/mine", content=text)
        assert r.status_code == 422 and r.json()["message"] == message, r.text


def test_reported_problems_are_capped(client: TestClient) -> None:
    keys = ", ".join(f"k{i}: 1" for i in range(500))
    r = client.put("/v1/profiles/mine", content=GOOD.replace("spec:\n", f"spec:\n  extra: {{{keys}}}\n"))
    assert r.status_code == 422
    body = r.json()
    assert len(body["problems"]) == 1 and body.get("omitted") is None  # one unknown field: `extra`
    many = "\n".join(f"  k{i}: 1" for i in range(500))
    body = client.put("/v1/profiles/mine", content=GOOD.replace("spec:\n", f"spec:\n{many}\n")).json()
    assert len(body["problems"]) == 20 and body["omitted"] == 480
    assert body["message"].splitlines()[-1] == "PUT /v1/profiles/mine: … and 480 more problems"


def test_profiles_are_parsed_off_the_event_loop(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bool] = []

    def load(text: str, source: str) -> FaultProfile:
        try:
            asyncio.get_running_loop()
            seen.append(True)
        except RuntimeError:  # a worker thread has no running loop
            seen.append(False)
        return load_text(text, source)

    monkeypatch.setattr(parsing, "load_text", load)
    assert client.put("/v1/profiles/mine", content=GOOD).status_code == 200
    assert seen == [False]


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_bearer_scheme_is_case_insensitive(runtime: Runtime, scheme: str) -> None:
    c = TestClient(build_app(runtime, {}, token="s3cret"))
    assert c.get("/v1/active", headers={"Authorization": f"{scheme} s3cret"}).status_code == 200
    assert c.get("/v1/active", headers={"Authorization": f"{scheme} s3cre"}).status_code == 401


def test_token_guards_the_api_documents_and_healthz_says_little(runtime: Runtime) -> None:
    info = {"proxyUrl": "https://127.0.0.1:1", "caFile": "/ca.pem", "upstream": "https://10.0.0.1:6443",
            "journal": "/var/journal.jsonl"}
    c = TestClient(build_app(runtime, info, token="s3cret"))
    auth = {"Authorization": "Bearer s3cret"}
    for path in ("/docs", "/redoc", "/openapi.json", "/v1/info", "/metrics"):
        assert c.get(path).status_code == 401, path
        assert c.get(path, headers=auth).status_code == 200, path
    assert c.get("/healthz").json() == {"ok": True}
    assert c.get("/v1/info", headers=auth).json() == {"version": __version__, "active": None, **info}
    # without a token (loopback only) /healthz still helps local scripts, but names no upstream or journal
    body = TestClient(build_app(runtime, info)).get("/healthz").json()
    assert body == {"ok": True, "version": __version__, "active": None, "proxyUrl": "https://127.0.0.1:1",
                    "caFile": "/ca.pem"}


def _refs(node: object) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(_refs(v) for v in node.values()))
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node))
    return set()


def test_openapi_document_is_complete(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    assert {"FaultProfile", "Rule", "Selector", "Fault", "ErrorBody", "ActivateRequest"} <= set(schemas)
    missing = {r for r in _refs(doc) if r.removeprefix("#/components/schemas/") not in schemas}
    assert not missing
    paths = doc["paths"]
    expected = {
        ("/v1/profiles/{name}", "get"): {"200", "401", "404"},
        ("/v1/profiles/{name}", "put"): {"200", "400", "401", "413", "422"},
        ("/v1/profiles/{name}", "delete"): {"200", "401", "404", "409"},
        ("/v1/active", "put"): {"200", "400", "401", "404", "413", "422"},
        ("/v1/journal", "get"): {"200", "401", "422"},
    }
    for (path, method), codes in expected.items():
        assert codes <= set(paths[path][method]["responses"]), (path, method)
    for path, item in paths.items():
        for method, operation in item.items():
            for code, answer in operation["responses"].items():
                if code.startswith("4"):
                    schema = answer["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (path, method, code)
    assert paths["/healthz"]["get"].get("security") is None
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"


def test_every_route_and_dependency_runs_on_the_proxys_event_loop(runtime: Runtime) -> None:
    """FastAPI runs a plain `def` endpoint or dependency in a worker thread: a profile switch there
    would race the proxy's own loop (and call loop.call_later from the wrong thread)."""
    import inspect

    from fastapi.routing import APIRoute
    from kube_fault_proxy.proxy.control import active, deps, events, observe, profiles, ui

    def calls(dependant: object) -> list[object]:
        found = [getattr(dependant, "call", None)]
        for sub in getattr(dependant, "dependencies", []):
            found += calls(sub)
        return [c for c in found if c is not None]

    def on_loop(c: object) -> bool:
        return inspect.iscoroutinefunction(c) or inspect.iscoroutinefunction(type(c).__call__)

    app = build_app(runtime, {})
    routes = [r for router in (active.router, observe.router, profiles.router, events.router, ui.router)
              for r in router.routes]
    routes += [r for r in app.routes if isinstance(r, APIRoute)]  # /healthz, /v1/info, the documents
    assert all(isinstance(r, APIRoute) for r in routes) and len(routes) >= 15
    found = {f"{r.path}: {getattr(c, '__name__', type(c).__name__)}": c for r in routes for c in calls(r.dependant)}
    found["every router: require_token"] = deps.require_token  # the guard each router is included with
    assert sorted(name for name, c in found.items() if not on_loop(c)) == []
