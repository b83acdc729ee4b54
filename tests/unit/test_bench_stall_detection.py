"""bench/stall_detection.py's pure parts: its profiles, and what it reads from the journal and the stats samples."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from kube_fault_proxy.proxy.profiles.loader import validate
from kube_fault_proxy.proxy.profiles.match import compile_selector
from kube_fault_proxy.proxy.requests.identity import parse

from tests.support.bench import load_bench

ROOT = Path(__file__).resolve().parents[2]
AGENTS = {  # what each target sends (client-go's DefaultKubernetesUserAgent plus rest.AddUserAgent's suffix)
    "kube-scheduler": "kube-scheduler/v1.37.2 (linux/amd64) kubernetes/0123abc/scheduler",
    "yunikorn": "yunikorn-scheduler/v0.0.0 (linux/amd64) kubernetes/$Format",
    "kcm-informers": "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/0123abc/shared-informers",
    "kcm-metadata": "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/0123abc/metadata-informers",
    "kcm-replicaset": "kube-controller-manager/v1.37.2 (linux/amd64) kubernetes/0123abc/"
                      "system:serviceaccount:kube-system:replicaset-controller",
}


def bench() -> ModuleType:
    return load_bench("stall_detection")


def matching(rules: list[dict[str, Any]], method: str, path: str, query: str, agent: str) -> list[str]:
    """The names of the rules whose selector matches this request."""
    profile = validate({"apiVersion": "kube-fault-proxy/v1", "kind": "FaultProfile", "metadata": {"name": "t"},
                        "spec": {"rules": rules}}, "<test>")
    ident = parse(method, path, query, AGENTS[agent])
    return [r.name for r in profile.spec.rules if compile_selector(r.match)(ident)]


BIND = ("POST", "/api/v1/namespaces/stall/pods/warmup/binding", "")
CREATE_POD = ("POST", "/api/v1/namespaces/stall/pods", "")
WATCH_PODS = ("GET", "/api/v1/pods", "watch=true&resourceVersion=12")
LIST_PODS = ("GET", "/api/v1/pods", "limit=500")


@pytest.mark.parametrize(("target", "request_", "agent", "expected"), [
    ("kube-scheduler", BIND, "kube-scheduler", ["reset-at-first-write"]),
    ("kube-scheduler", WATCH_PODS, "kube-scheduler", ["stall-next-pods-watch", "mark-pods-list-watch"]),
    ("kube-scheduler", LIST_PODS, "kube-scheduler", ["mark-pods-list-watch"]),
    ("kube-scheduler", WATCH_PODS, "yunikorn", []),
    ("yunikorn", BIND, "yunikorn", ["reset-at-first-write"]),
    ("yunikorn", WATCH_PODS, "yunikorn", ["stall-next-pods-watch", "mark-pods-list-watch"]),
    ("kube-controller-manager", CREATE_POD, "kcm-replicaset", ["reset-at-first-write"]),
    ("kube-controller-manager", WATCH_PODS, "kcm-informers", ["stall-next-pods-watch", "mark-pods-list-watch"]),
    # the garbage collector's metadata informer watches pods too: not the informer the ReplicaSet controller reads
    ("kube-controller-manager", WATCH_PODS, "kcm-metadata", []),
    ("kube-controller-manager", BIND, "kcm-replicaset", []),
])
def test_stall_stream_rules_select_the_targets_own_requests(target: str, request_: tuple[str, str, str],
                                                             agent: str, expected: list[str]) -> None:
    b = bench()
    rules = b.rules(b.TARGETS[target], "stallStream", 120, 0)
    assert matching(rules, *request_, agent) == expected


def test_stall_stream_waits_for_the_reset_and_stalls_one_watch_from_its_first_event() -> None:
    b = bench()
    stall = b.rules(b.TARGETS["kube-scheduler"], "stallStream", 240, 1)[1]
    assert stall["when"]["maxInjections"] == 1
    assert stall["when"]["trigger"]["match"]["subresources"] == ["binding"]
    assert stall["fault"] == {"stallStream": {"afterEvents": 1, "for": "240s"}}


def test_stall_connection_rules_stall_at_the_first_write_and_mark_relists() -> None:
    b = bench()
    rules = b.rules(b.TARGETS["kube-controller-manager"], "stallConnection", 180, 0)
    assert [r["name"] for r in rules] == ["stall-at-first-write", "mark-pods-list-watch"]
    assert rules[0]["fault"] == {"stallConnection": {"for": "180s"}}
    assert matching(rules, *CREATE_POD, "kcm-replicaset") == ["stall-at-first-write"]
    assert matching(rules, *LIST_PODS, "kcm-informers") == ["mark-pods-list-watch"]


@pytest.mark.parametrize(("kind", "seconds", "message"), [
    ("stallStream", 241, "--for 241: stallStream runs last 1..240 s"),
    ("stallConnection", 181, "--for 181: stallConnection runs last 1..180 s"),
    ("stallStream", 0, "--for 0: stallStream runs last 1..240 s"),
    ("outage", 10, "kind 'outage': must be one of stallStream, stallConnection")])
def test_windows_and_kinds_out_of_bounds_are_refused(kind: str, seconds: int, message: str) -> None:
    b = bench()
    with pytest.raises(ValueError) as refused:
        b.rules(b.TARGETS["yunikorn"], kind, seconds, 0)
    assert str(refused.value) == message


JOURNAL = [
    {"seq": 1, "time": 100.0, "event": "inject", "rule": "reset-at-first-write", "fault": "resetUpstream"},
    {"seq": 2, "time": 100.5, "event": "inject", "rule": "mark-pods-list-watch", "fault": "delay",
     "request": {"verb": "watch", "resource": "pods"}},  # before the stall: not a notice
    {"seq": 3, "time": 101.0, "event": "watch-event", "action": "stalled", "rule": "stall-next-pods-watch"},
    {"seq": 4, "time": 221.0, "event": "stall-end", "stall": "stream", "reason": "window", "stalledSeconds": 120.0},
    {"seq": 5, "time": 221.4, "event": "inject", "rule": "mark-pods-list-watch", "fault": "delay",
     "request": {"verb": "watch", "resource": "pods", "resourceVersion": "812", "userAgent": "kube-scheduler/x"}},
]


def test_the_stall_begins_at_its_watch_event_and_ends_at_its_stall_end() -> None:
    b = bench()
    assert b.stall_start(JOURNAL, "stallStream") == 101.0
    assert b.stall_start(JOURNAL, "stallConnection") is None
    assert b.stall_end(JOURNAL, "stallStream") == {"time": 221.0, "reason": "window", "stalledSeconds": 120.0}
    assert b.stall_end(JOURNAL, "stallConnection") is None


def test_a_relist_counts_only_after_the_stall_began() -> None:
    relists = bench().relists_after(JOURNAL, 101.0)
    assert relists == [{"time": 221.4, "verb": "watch", "sendInitialEvents": False, "resourceVersion": "812",
                        "userAgent": "kube-scheduler/x"}]


def test_stats_growth_is_measured_from_the_first_sample_after_the_start() -> None:
    samples = [{"time": 100.8, "podRequests": 3, "clientAccepted": 2},
               {"time": 101.2, "podRequests": 4, "clientAccepted": 2},  # counts the stalled watch itself
               {"time": 150.0, "podRequests": 4, "clientAccepted": 3},
               {"time": 221.6, "podRequests": 5, "clientAccepted": 3}]
    b = bench()
    assert b.first_growth(samples, 101.0, "podRequests") == 221.6
    assert b.first_growth(samples, 101.0, "clientAccepted") == 150.0
    assert b.first_growth(samples, 300.0, "podRequests") is None
    assert b.first_growth(samples[:2], 101.0, "podRequests") is None


def test_pod_requests_sum_lists_watches_and_watch_lists_only() -> None:
    stats = {"requestsByResource": {"list pods": 2, "watch pods": 5, "watch pods (sendInitialEvents)": 1,
                                    "watch nodes": 9, "create pods": 4}}
    assert bench().pod_requests(stats) == 8


def run_of(journal: list[dict[str, Any]], kind: str = "stallStream") -> dict[str, Any]:
    return {"target": "kube-scheduler", "kind": kind, "forSeconds": 120, "kubernetes": "v1.37.2",
            "journal": journal, "samples": [{"time": 101.2, "podRequests": 4, "clientAccepted": 2},
                                            {"time": 221.6, "podRequests": 5, "clientAccepted": 2}],
            "work": {"createdAt": 102.0, "doneAt": 223.3}}


def test_a_target_that_relists_only_when_the_stall_ends_did_not_notice_it() -> None:
    s = bench().summarize(run_of(JOURNAL))
    assert s["noticedDuringStall"] is False
    assert (s["noticedByJournal"], s["noticedByStats"], s["newConnection"]) == (120.4, 120.6, None)
    assert s["stallEnd"] == {"time": 221.0, "reason": "window", "stalledSeconds": 120.0, "at": 120.0}
    assert (s["workCreated"], s["workDone"]) == (1.0, 122.3)


def test_a_connection_closed_by_the_client_is_a_notice_during_the_stall() -> None:
    journal = [{"seq": 1, "time": 50.0, "event": "inject", "rule": "stall-at-first-write", "fault": "stallConnection"},
               {"seq": 2, "time": 95.2, "event": "stall-end", "stall": "connection", "reason": "connection-lost",
                "stalledSeconds": 45.2},
               {"seq": 3, "time": 95.9, "event": "inject", "rule": "mark-pods-list-watch",
                "request": {"verb": "watch", "resource": "pods"}}]
    run = run_of(journal, "stallConnection")
    run["samples"] = [{"time": 50.3, "podRequests": 4, "clientAccepted": 1},
                      {"time": 95.5, "podRequests": 4, "clientAccepted": 2},
                      {"time": 96.0, "podRequests": 5, "clientAccepted": 2}]
    run["work"] = {"createdAt": 51.0, "doneAt": 97.0}
    s = bench().summarize(run)
    assert s["noticedDuringStall"] is False  # the relist came after the connection closed: the close was the notice
    assert (s["stallEnd"]["reason"], s["stallEnd"]["at"], s["newConnection"]) == ("connection-lost", 45.2, 45.5)
    assert (s["noticedByJournal"], s["workDone"]) == (45.9, 47.0)


def test_results_round_trip_into_the_table(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    failed = {"target": "yunikorn", "kind": "stallConnection", "forSeconds": 90, "kubernetes": "v1.37.2",
              "journal": [], "samples": [], "work": {}, "error": "cluster up failed (1): etcd"}
    path.write_text(json.dumps({"runs": [run_of(JOURNAL), failed]}))
    b = bench()
    lines = b.table(b.load_results(path)).splitlines()
    assert lines[2] == ("| kube-scheduler | v1.37.2 | stallStream | 120 s | 120.4 s / 120.6 s | — | "
                        "120.0 s (window) | 1.0 s | 122.3 s |")
    assert lines[3].startswith("| yunikorn | v1.37.2 | stallConnection | 90 s | run failed: cluster up failed")


@pytest.mark.parametrize(("content", "message"), [
    ("{", "r.json: Expecting"),
    ('{"runs": {}}', "r.json: runs: missing or not a list"),
    ('{"runs": [{"target": "x", "kind": "stallStream", "journal": [], "samples": []}]}',
     r"r.json: runs\[0\].work: missing or not a dict"),
    ('{"runs": [{"target": "x", "kind": "outage", "journal": [], "samples": [], "work": {}}]}',
     r"r.json: runs\[0\].kind: 'outage' is not one of"),
])
def test_bad_results_files_are_named_with_their_field(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        bench().load_results(path)


def test_log_excerpt_keeps_the_lines_about_watches_connections_and_errors() -> None:
    text = "\n".join(["I1207 01:00:00 starting", "W1207 01:00:46 http2: client connection lost",
                      "I1207 01:00:47 Warning: watch ended with error", "I1207 01:00:48 bound pod"] + ["x"] * 3)
    out = bench().log_excerpt(text)
    assert out == {"lines": 7, "matching": 2, "excerpt": ["W1207 01:00:46 http2: client connection lost",
                                                          "I1207 01:00:47 Warning: watch ended with error"]}


def test_a_long_log_keeps_its_first_and_last_matching_lines() -> None:
    b = bench()
    out = b.log_excerpt("\n".join(f"watch {i}" for i in range(b.MAX_LOG_LINES + 10)))
    half = b.MAX_LOG_LINES // 2
    assert out["matching"] == b.MAX_LOG_LINES + 10
    assert out["excerpt"] == [f"watch {i}" for i in range(half)] + \
        [f"watch {i}" for i in range(half + 10, b.MAX_LOG_LINES + 10)]
