"""Each fault kind's plan: the exact replies and steps it asks the addon to perform."""

from __future__ import annotations

import json
import random

from kube_fault_proxy.proxy.faults import Abort, CommitThenFail, Delay, Hang, Reset, Throttle
from kube_fault_proxy.proxy.faults.plan import ResetStream, Respond, Wait
from kube_fault_proxy.proxy.requests.status import APF_429_BODY, TIMEOUT_MESSAGE

from tests.support.builders import bind

RNG = random.Random(0)


def reply_of(step: object) -> tuple[int, dict[str, str], bytes]:
    assert isinstance(step, Respond)
    return step.reply.status, dict(step.reply.headers), step.reply.body


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


def test_throttle_apf_form_is_plain_text() -> None:
    status, headers, body = reply_of(Throttle(retryAfterSeconds=4).plan(bind("p"), RNG).before[0])
    assert (status, body) == (429, APF_429_BODY)
    assert headers == {"Retry-After": "4", "Content-Type": "text/plain; charset=utf-8",
                       "X-Content-Type-Options": "nosniff"}


def test_throttle_status_form() -> None:
    status, headers, body = reply_of(Throttle(form="status").plan(bind("p"), RNG).before[0])
    doc = json.loads(body)
    assert (status, headers["Retry-After"], doc["reason"], doc["details"]["retryAfterSeconds"]) == (
        429, "1", "TooManyRequests", 1)


def test_delay_request_and_response_phase() -> None:
    assert Delay(seconds=1.5).plan(bind("p"), RNG).before == (Wait(1.5),)
    resp = Delay(seconds=1.5, phase="response").plan(bind("p"), RNG)
    assert resp.before == () and resp.after == (Wait(1.5),) and resp.forwards
    assert not resp.after_only_if_committed  # a slow answer is slow whatever it says


def test_delay_jitter_stays_in_bounds() -> None:
    rng = random.Random(1)
    waits = [Delay(seconds=1, jitterSeconds=0.5).plan(bind("p"), rng).before[0] for _ in range(500)]
    seconds = [w.seconds for w in waits if isinstance(w, Wait)]
    assert 0.5 <= min(seconds) < 0.6 and 1.4 < max(seconds) <= 1.5
    assert all(s >= 0 for s in (Delay(seconds=0.1, jitterSeconds=5).plan(bind("p"), rng).before[0].seconds  # type: ignore[union-attr]
                                for _ in range(50)))


def test_hang_then_timeout_or_reset() -> None:
    wait, end = Hang(seconds=3).plan(bind("p"), RNG).before
    assert wait == Wait(3, until_client_gone=True)
    status, _, body = reply_of(end)
    assert status == 504 and json.loads(body)["message"] == TIMEOUT_MESSAGE
    assert Hang(then="reset").plan(bind("p"), RNG).before == (Wait(3600.0, True), ResetStream())


def test_reset() -> None:
    assert Reset().plan(bind("p"), RNG).before == (ResetStream(),)


def test_commit_then_fail_acts_after_upstream() -> None:
    plan = CommitThenFail(abort=Abort(status=500)).plan(bind("p"), RNG)
    assert plan.before == () and plan.forwards and plan.after_only_if_committed
    assert reply_of(plan.after[0])[0] == 500
    assert CommitThenFail(reset=Reset()).plan(bind("p"), RNG).after == (ResetStream(),)
    assert plan.describe() == "forward, then respond 500"


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


def test_connection_faults_plan_connection_steps() -> None:
    from kube_fault_proxy.proxy.faults import Outage, ResetUpstream
    from kube_fault_proxy.proxy.faults.plan import CloseUpstream, StartOutage

    plan = Outage(seconds=10).plan(bind("p"), RNG)
    assert plan.before == (StartOutage(10, "close"),) and not plan.forwards
    assert plan.describe() == "outage 10s (close new connections)"
    assert ResetUpstream().plan(bind("p"), RNG).before == (CloseUpstream(),)


def test_cut_plans() -> None:
    from kube_fault_proxy.proxy.faults import Cut
    from kube_fault_proxy.proxy.faults.plan import EditEvents, LimitWatch

    assert Cut(afterSeconds=30).plan(bind("p"), RNG).before == (LimitWatch(30),)
    steps = Cut(afterSeconds=5, error="internal").plan(bind("p"), RNG).before
    assert steps[0] == LimitWatch(5) and isinstance(steps[1], EditEvents)
    assert Cut(afterEvents=3).plan(bind("p"), RNG).describe() == "end the watch after 3 events with a connection cut, then forward"
