"""The served OpenAPI document is the contract: schemathesis, driven by it against a real `serve`
with a control token, finds no 5xx and no undocumented status, content type or body shape."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support.processes import ROOT, Started, start_proxy

TOKEN = "contract-t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# Not negative_data_rejection: it counts an unknown query parameter as invalid input, and the control
# plane, like the apiserver, ignores those (strictness is for bodies: profiles and PUT /v1/active).
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance,
          ignored_auth]
EXAMPLES = 25  # per operation and generation mode: bounded, ~1,000 requests in all
OPERATIONS = [
    ("GET", "/healthz"), ("GET", "/v1/info"), ("GET", "/v1/profiles"), ("GET", "/v1/profiles/{name}"),
    ("PUT", "/v1/profiles/{name}"), ("DELETE", "/v1/profiles/{name}"), ("GET", "/v1/active"),
    ("PUT", "/v1/active"), ("DELETE", "/v1/active"), ("GET", "/v1/stats"), ("POST", "/v1/stats/reset"),
    ("GET", "/v1/journal"), ("GET", "/v1/cluster"), ("GET", "/metrics"), ("GET", "/v1/events/stream"),
]
# The dashboard's live feed never ends on its own: it is under the document's contract (above), its
# stream is tested in tests/unit/test_control_events.py, and fuzzing it would only hang.
STREAMS = {("GET", "/v1/events/stream")}


@pytest.fixture(scope="module")
def guarded(upstream: Started, pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    started = start_proxy(upstream.extra["url"], pki, tmp_path_factory.mktemp("contract"),
                          env={"KFP_CONTROL_TOKEN": TOKEN})
    yield started
    assert started.stop() == 0, started.log.read_text()
    log = started.log.read_text()
    assert "Traceback" not in log and "Exception in ASGI" not in log, log[-3000:]


@pytest.fixture(scope="module")
def served_schema(guarded: Started) -> schemathesis.BaseSchema:
    url = guarded.ready["controlUrl"]
    assert httpx.get(f"{url}/openapi.json").status_code == 401  # the document itself is guarded
    return schemathesis.openapi.from_url(f"{url}/openapi.json", headers=AUTH, timeout=10)


def test_every_served_operation_is_under_contract(served_schema: schemathesis.BaseSchema) -> None:
    served = {(op.ok().method.upper(), op.ok().path) for op in served_schema.get_all_operations()}
    assert served == set(OPERATIONS)


CASES = [(m, p, mode) for m, p in OPERATIONS for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
         if not (p == "/healthz" and mode is GenerationMode.NEGATIVE)  # it takes no input to get wrong
         and (m, p) not in STREAMS]


@pytest.mark.parametrize(("method", "path", "mode"), CASES,
                         ids=[f"{m} {p} {'valid' if mode is GenerationMode.POSITIVE else 'invalid'}"
                              for m, p, mode in CASES])
def test_every_answer_is_documented_and_none_is_a_5xx(
    served_schema: schemathesis.BaseSchema, method: str, path: str, mode: GenerationMode
) -> None:
    operation = served_schema[path][method]
    statuses: list[int] = []

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: schemathesis.Case) -> None:
        response = case.call_and_validate(headers=AUTH, checks=CHECKS, timeout=10)
        statuses.append(response.status_code)
        assert response.status_code < 500

    run()
    assert statuses, "no request was made"
    assert all(s < 500 for s in statuses)


# The whole run as a user would start it: every check and phase (examples, coverage, fuzzing, stateful),
# with and without a control token, the live feed included (2 events read per call). Bounded: ~15 s a mode.
ALL_EXAMPLES = 30
HOOKS = "tests.support.contract_hooks"  # the rules the document states only in prose, for valid requests


@pytest.fixture(scope="module")
def unguarded(upstream: Started, pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Started]:
    started = start_proxy(upstream.extra["url"], pki, tmp_path_factory.mktemp("contract-open"))
    yield started
    assert started.stop() == 0, started.log.read_text()
    log = started.log.read_text()
    assert "Traceback" not in log and "Exception in ASGI" not in log, log[-3000:]


@pytest.mark.parametrize("mode", ["token", "no-token"])
def test_schemathesis_checks_all_finds_nothing(request: pytest.FixtureRequest, mode: str, tmp_path: Path) -> None:
    started: Started = request.getfixturevalue("guarded" if mode == "token" else "unguarded")
    url = started.ready["controlUrl"]
    document = httpx.get(f"{url}/openapi.json", headers=AUTH).json()
    secured = [op["security"] for item in document["paths"].values() for op in item.values() if op.get("security")]
    assert secured and all(({} in s) == (mode == "no-token") for s in secured)  # {}: no credentials needed
    config = tmp_path / "schemathesis.toml"
    config.write_text("max-stream-events = 2\n")
    auth = ["-H", f"Authorization: Bearer {TOKEN}"] if mode == "token" else []
    run = subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run", f"{url}/openapi.json",
         *auth, "--checks", "all", "--max-examples", str(ALL_EXAMPLES), "--workers", "1", "--seed", "1",
         "--request-timeout", "10", "--generation-database", "none", "--no-color"],
        cwd=tmp_path, env={**os.environ, "SCHEMATHESIS_HOOKS": HOOKS, "PYTHONPATH": str(ROOT)},  # its state there
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "Tested: 15" in run.stdout and " passed" in run.stdout, run.stdout[-3000:]
