"""expire (proxy.faults.expire): a watch answered with 410 Expired, in its own encoding; which watches it takes."""

from __future__ import annotations

import json
import random

from tests.support.plans import reply_of

RNG = random.Random(0)


def test_expire_answers_a_json_watch_with_the_error_event() -> None:
    from kube_fault_proxy.proxy.faults import Expire
    from kube_fault_proxy.proxy.requests.identity import parse

    ident = parse("GET", "/api/v1/pods", "watch=1&resourceVersion=120", accept="application/json")
    status, headers, body = reply_of(Expire().plan(ident, RNG).before[0])
    assert (status, headers["Content-Type"]) == (200, "application/json")
    assert json.loads(body) == {"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "too old resource version: 120 (121)", "reason": "Expired", "code": 410}}


def test_expire_answers_a_protobuf_watch_with_http_410() -> None:
    from kube_fault_proxy.proxy.faults import Expire
    from kube_fault_proxy.proxy.requests.identity import parse

    ident = parse("GET", "/api/v1/pods", "watch=1", accept="application/vnd.kubernetes.protobuf;stream=watch")
    status, _, body = reply_of(Expire().plan(ident, RNG).before[0])
    assert status == 410 and json.loads(body)["reason"] == "Expired"


def test_expire_applies_only_to_watches_and_chosen_resource_versions() -> None:
    from kube_fault_proxy.proxy.faults import Expire
    from kube_fault_proxy.proxy.requests.identity import parse

    watch, rewatch = parse("GET", "/api/v1/pods", "watch=1"), parse("GET", "/api/v1/pods", "watch=1&resourceVersion=5")
    relist = parse("GET", "/api/v1/pods", "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan")
    assert Expire().applies_to(watch) and not Expire().applies_to(parse("GET", "/api/v1/pods"))
    assert not Expire().applies_to(relist)
    assert not Expire(onlyRewatch=True).applies_to(watch) and Expire(onlyRewatch=True).applies_to(rewatch)
    assert Expire(resourceVersion="5").applies_to(rewatch) and not Expire(resourceVersion="6").applies_to(rewatch)
