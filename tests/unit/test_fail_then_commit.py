"""failThenCommit: the schema, and a plan that answers first and sends the write later."""

from __future__ import annotations

import json
import random

import pytest
from kube_fault_proxy.proxy.faults import Fault
from kube_fault_proxy.proxy.faults.fail_then_commit import FailThenCommit
from kube_fault_proxy.proxy.faults.plan import CommitLater, ResetStream, Respond
from kube_fault_proxy.proxy.requests.identity import parse_untrusted
from pydantic import ValidationError


@pytest.mark.parametrize(("method", "path", "query", "applies"), [
    ("POST", "/api/v1/namespaces/ns/configmaps", "", True),
    ("PUT", "/api/v1/namespaces/ns/configmaps/a", "", True),
    ("PATCH", "/api/v1/namespaces/ns/pods/a/status", "", True),
    ("DELETE", "/api/v1/namespaces/ns/configmaps/a", "", True),
    ("POST", "/api/v1/namespaces/ns/pods/a/binding", "", True),
    ("GET", "/api/v1/namespaces/ns/configmaps", "", False),
    ("GET", "/api/v1/pods", "watch=1", False),
    ("GET", "/healthz", "", False),
])
def test_it_applies_to_writes_only(method: str, path: str, query: str, applies: bool) -> None:
    spec = FailThenCommit(status=504, commitAfterSeconds=1)
    assert spec.applies_to(parse_untrusted(method, path, query, "", None, "", "")) is applies


def test_the_client_gets_the_apiservers_timeout_first_and_the_write_goes_later() -> None:
    i = parse_untrusted("POST", "/api/v1/namespaces/ns/configmaps", "", "", None, "", "")
    plan = FailThenCommit(status=504, commitAfterSeconds=2.5).plan(i, random.Random(0))
    assert not plan.forwards and plan.before[0] == CommitLater(2.5)
    reply = plan.before[1]
    assert isinstance(reply, Respond) and reply.reply.status == 504
    assert json.loads(reply.reply.body)["reason"] == "Timeout"
    assert plan.describe() == "send the write upstream in 2.5s, then respond 504"
    reset = FailThenCommit(reset=True, commitAfterSeconds=0).plan(i, random.Random(0))
    assert reset.before == (CommitLater(0), ResetStream())


@pytest.mark.parametrize(("spec", "error"), [
    ({"commitAfterSeconds": 1}, "exactly one of status, reset"),
    ({"status": 504, "reset": True, "commitAfterSeconds": 1}, "exactly one of status, reset"),
    ({"status": 504}, "commitAfterSeconds"),
    ({"status": 200, "commitAfterSeconds": 1}, "greater than or equal to 400"),
    ({"status": 504, "commitAfterSeconds": 301}, "less than or equal to 300"),
])
def test_bad_settings_are_refused(spec: dict[str, object], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        Fault.model_validate({"failThenCommit": spec})
    assert all(f.description for f in FailThenCommit.model_fields.values())
