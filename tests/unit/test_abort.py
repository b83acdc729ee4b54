"""abort (proxy.faults.abort): the Kubernetes Status it answers with, as the apiserver writes it."""

from __future__ import annotations

import json
import random

from kube_fault_proxy.proxy.faults import Abort

from tests.support.builders import bind
from tests.support.plans import reply_of

RNG = random.Random(0)


def test_abort_is_a_kubernetes_status_without_retry_after() -> None:
    plan = Abort(status=500).plan(bind("p1"), RNG)
    status, headers, body = reply_of(plan.before[0])
    assert status == 500 and "Retry-After" not in headers
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body) == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Internal error occurred: injected by kube-fault-proxy",
        "reason": "InternalError", "details": {"name": "p1", "kind": "pods"}, "code": 500,
    }
    assert not plan.forwards


def test_abort_with_retry_after_sets_header_and_details() -> None:
    plan = Abort(status=503, message="etcd down", retryAfterSeconds=2).plan(bind("p1"), RNG)
    status, headers, body = reply_of(plan.before[0])
    doc = json.loads(body)
    assert (status, headers["Retry-After"], doc["reason"], doc["message"]) == (
        503, "2", "ServiceUnavailable", "etcd down")
    assert doc["details"]["retryAfterSeconds"] == 2


def test_abort_conflict_reads_like_the_apiserver() -> None:
    _, _, body = reply_of(Abort(status=409).plan(bind("p1"), RNG).before[0])
    assert json.loads(body)["message"].startswith('Operation cannot be fulfilled on pods/binding "p1"')
