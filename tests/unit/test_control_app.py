"""The control plane's HTTP contract, driven in-process (no sockets)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from proxy.control.app import build_app
from proxy.journal import Journal
from proxy.library import Library, load_dir
from proxy.runtime import Runtime
from tests.unit.helpers import bind

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
def runtime(tmp_path: Path) -> Runtime:
    lib = Library(load_dir(ROOT / "fault_profiles"))
    return Runtime(lib, Journal(tmp_path / "j.jsonl", time.time), time.monotonic, time.time)


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
    assert runtime.active is not None and runtime.active.engine.profile.name == "bind-slow"
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
        runtime.performed(d, ident, action="respond 503")
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
