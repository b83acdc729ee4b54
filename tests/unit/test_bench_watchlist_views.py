"""bench/watchlist_views.py's pure parts: the control planes it asks for, the profiles it activates (valid, and
matching the requests they are meant for), the twoViews seed, and how it reads the proxy's counts and journal."""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from kube_fault_proxy.proxy.profiles.loader import validate
from kube_fault_proxy.proxy.profiles.match import compile_selector
from kube_fault_proxy.proxy.requests.identity import RequestIdentity, parse

from tests.support.bench import load_bench

ROOT = Path(__file__).resolve().parents[2]


def bench() -> ModuleType:
    return load_bench("watchlist_views")


B = bench()


def test_each_target_alone_goes_through_the_proxy() -> None:
    kcm = B.up_args("kube-controller-manager", Path("/tmp/x"), 5)
    assert kcm == ["cluster", "--state-dir", "/tmp/x", "up", "--nodes", "5", "--proxy", "--scheduler",
                   "kube-scheduler", "--through-proxy", "kube-controller-manager", "--workload-controllers"]
    yk = B.up_args("yunikorn", Path("/tmp/y"), 5, "v1.37.2")
    assert yk[-4:] == ["--scheduler", "yunikorn", "--kubernetes", "v1.37.2"]
    assert "--through-proxy" not in yk  # the scheduler alone is the default


def test_every_run_is_a_valid_profile() -> None:
    assert len(B.RUNS) == 22
    for run in B.RUNS.values():
        doc = {"apiVersion": "kube-fault-proxy/v1", "kind": "FaultProfile", "metadata": {"name": f"wlv-{run.name}"},
               "spec": {"seed": 1, "rules": B.profile_rules(run)}}
        profile = validate(doc, run.name)
        kinds = [next(iter(rule.model_dump(exclude_none=True)["fault"])) for rule in profile.spec.rules]
        assert kinds[-1] == run.kind and set(kinds[:-1]) == {"resetUpstream"}, (run.name, kinds)


def test_an_unknown_target_or_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown target"):
        B.Run("x", "kube-proxy", "watchList", {})
    with pytest.raises(ValueError, match="unknown kind"):
        B.Run("x", "yunikorn", "staleList", {})


def selector(rule: dict[str, Any]) -> Callable[[RequestIdentity], bool]:
    validated = validate({"apiVersion": "kube-fault-proxy/v1", "kind": "FaultProfile", "metadata": {"name": "s"},
                          "spec": {"rules": [rule]}}, "s")
    return compile_selector(validated.spec.rules[0].match)


BINDING = parse("POST", "/api/v1/namespaces/wlv-t1/pods/trigger/binding", body=b'{"target":{"name":"n1"}}',
                content_type="application/json")
POD_CREATE = parse("POST", "/api/v1/namespaces/wlv-t1/pods", body=b'{"metadata":{"generateName":"trigger-"}}',
                   content_type="application/json")
WORK_BINDING = parse("POST", "/api/v1/namespaces/wlv/pods/work-0/binding", body=b'{"target":{"name":"n1"}}',
                     content_type="application/json")


def test_the_reset_takes_the_targets_first_write_in_the_trigger_namespace_only() -> None:
    for_scheduler = selector(B.reset_rule("r", "yunikorn", "wlv-t1"))
    assert for_scheduler(BINDING) and not for_scheduler(POD_CREATE) and not for_scheduler(WORK_BINDING)
    for_kcm = selector(B.reset_rule("r", "kube-controller-manager", "wlv-t1"))
    assert for_kcm(POD_CREATE) and not for_kcm(BINDING)
    assert B.reset_rule("r", "kube-scheduler", "wlv-t1")["when"] == {"maxInjections": 1}


def test_the_watch_list_rule_takes_pods_watches() -> None:
    rule = B.profile_rules(B.RUNS["wl-yk-withhold"])[-1]
    match = selector(rule)
    assert match(parse("GET", "/api/v1/pods", "watch=true&sendInitialEvents=true&allowWatchBookmarks=true"))
    assert not match(parse("GET", "/api/v1/nodes", "watch=true&sendInitialEvents=true"))


def test_the_two_views_seed_gives_the_first_client_the_view_asked_for() -> None:
    for view in (0, 1):
        seed = B.seed_for_first_view(B.TWO_VIEWS_RULE, view)
        assert random.Random(f"{seed}/{B.TWO_VIEWS_RULE}/views").randrange(2) == view
        assert all(B.first_view(s, B.TWO_VIEWS_RULE) != view for s in range(1, seed))
    with pytest.raises(ValueError, match="0 or 1"):
        B.seed_for_first_view("r", 2)


def test_relist_counts_read_the_proxys_request_keys() -> None:
    got = B.relist_counts({"watch pods (sendInitialEvents)": 2, "list pods": 1, "watch pods": 4, "list nodes": 9})
    assert got == {"watchListPods": 2, "watchPods": 4, "listPods": 1}
    assert B.relist_counts({}) == {"watchListPods": 0, "watchPods": 0, "listPods": 0}


def test_the_journal_summary_counts_and_orders_what_matters() -> None:
    records = [
        {"seq": 1, "time": 10.0, "event": "activate"},
        {"seq": 2, "time": 11.0, "event": "inject", "rule": "reset-1", "fault": "resetUpstream"},
        {"seq": 3, "time": 11.5, "event": "view-pinned", "view": 1, "client": "ks", "clientConnection": 1,
         "connection": "c2"},
        {"seq": 4, "time": 11.6, "event": "inject", "rule": "tv", "fault": "twoViews", "view": 1,
         "servedResourceVersion": "120", "seenSecondsAgo": 3.1, "writesSince": 7,
         "request": {"verb": "watch", "resource": "pods"}},
        {"seq": 5, "time": 12.0, "event": "watch-event", "rule": "w", "action": "initial-events-end-withheld"},
        {"seq": 6, "time": 13.0, "event": "view-pinned", "view": 0, "client": "ks", "clientConnection": 2,
         "connection": "c3"},
    ]
    s = B.journal_summary(records)
    assert s["events"] == {"activate": 1, "inject": 2, "view-pinned": 2, "watch-event": 1}
    assert s["injectionsByRule"] == {"reset-1": 1, "tv": 1}
    assert s["watchEdits"] == {"initial-events-end-withheld": 1}
    assert [(p["view"], p["clientConnection"]) for p in s["viewPins"]] == [(1, 1), (0, 2)]
    [stale] = s["staleReads"]
    assert (stale["verb"], stale["servedResourceVersion"], stale["writesSince"]) == ("watch", "120", 7)
    assert B.first_time(records, "inject", "reset-1") == 11.0
    assert B.first_time(records, "inject", "reset-2") is None


def test_done_means_bound_pods_or_ready_replicas() -> None:
    bound = {"spec": {"nodeName": "n1"}}
    assert B.pods_done([bound] * 3, 3)
    assert not B.pods_done([bound, bound, {"spec": {}}], 3)
    assert not B.pods_done([bound] * 2, 3)
    assert B.replica_set_done({"status": {"readyReplicas": 3}}, 3)
    assert not B.replica_set_done({"status": {"replicas": 3}}, 3)
    assert not B.replica_set_done({}, 3)


def test_end_by_is_utc_today_or_tomorrow_and_bad_text_is_named() -> None:
    now = dt.datetime(2026, 12, 7, 0, 30, tzinfo=dt.UTC)
    assert B.parse_end_by("01:40", now) == dt.datetime(2026, 12, 7, 1, 40, tzinfo=dt.UTC)
    late = dt.datetime(2026, 12, 6, 23, 50, tzinfo=dt.UTC)
    assert B.parse_end_by("01:40", late) == dt.datetime(2026, 12, 7, 1, 40, tzinfo=dt.UTC)
    with pytest.raises(Exception, match="--end-by '1h'"):
        B.parse_end_by("1h", now)


def test_budgets_grow_with_the_fault_time() -> None:
    short = B.run_budget(B.RUNS["wl-kcm-truncate-expired"], 60, 30)
    long = B.run_budget(B.RUNS["wl-kcm-withhold"], 60, 30)
    assert long - short == 30
    assert B.run_budget(B.RUNS["tv-ks"], 60, 30) > 0


def test_with_no_runs_it_lists_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert B.main([]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(B.RUNS)
    assert lines[0].split()[0] == "wl-kcm-withhold"
    assert lines[-1].split()[0] == "tv-yk-writes" and json.loads(lines[-1].split(None, 3)[3]) == {"lagWrites": 5}


def test_an_unknown_run_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        B.main(["wl-nope"])
    assert e.value.code == 2
    assert "unknown run(s): wl-nope" in capsys.readouterr().err


def test_the_journal_file_is_read_after_the_cursor(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_text("".join(json.dumps({"seq": i, "time": float(i), "event": "e"}) + "\n" for i in range(1, 6)) + "\n")
    assert [r["seq"] for r in B.read_journal(path, 3)] == [4, 5]


def test_the_tables_show_each_run_once_in_its_table() -> None:
    relist = {"watchListPods": 1, "watchPods": 0, "listPods": 0}
    wl = {"run": "wl-yk-delay20", "kind": "watchList", "atStart": {"relist": relist},
          "stats": {"relist": {"watchListPods": 2, "watchPods": 1, "listPods": 0}},
          "journal": {"watchEdits": {"initial-events-end-delayed": 1}, "viewPins": [], "staleReads": []},
          "work": [{"doneAfterResetSeconds": 21.3}], "faultOnSeconds": 23.4}
    tv = {"run": "tv-ks", "kind": "twoViews", "atStart": {"relist": relist}, "stats": {
        "relist": relist, "bindsTotal": {"succeeded": 11, "failed": 2, "throttled": 0}},
          "journal": {"watchEdits": {}, "viewPins": [{"view": 1}, {"view": 0}],
                      "staleReads": [{"writesSince": 4}, {"writesSince": 9}, {}]},
          "work": [{"doneAfterSeconds": 0.5, "maxPodsSeen": 3}, {"doneAfterSeconds": None, "maxPodsSeen": 4}],
          "check": {"exit": 1}}
    failed = {"run": "wl-kcm-withhold", "kind": "watchList", "error": "RuntimeError: up failed"}
    wl_table, tv_table = B.table([wl, tv, failed]).split("\n\n")
    assert wl_table.splitlines()[2:] == [
        "| wl-yk-delay20 | 1 / 0 | 2 / 0 / 1 | initial-events-end-delayed 1 | 21.3 | 23.4 s |",
        "| wl-kcm-withhold | error: RuntimeError: up failed |"]
    assert tv_table.splitlines()[2:] == ["| tv-ks | 1 0 | 3 (9) | 11 / 2 | 4 | 0.5 / - | 1 |"]


def test_a_bad_end_by_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        B.main(["tv-ks", "--end-by", "01:38:30"])
    assert e.value.code == 2
    assert "--end-by '01:38:30': expected HH:MM (UTC)" in capsys.readouterr().err


def test_log_signs_keep_the_run_namespaces_and_the_watch_list_waits() -> None:
    lines = ['I1207 replica_set.go:668] "Too few replicas" replicaSet="wlv/a" need=3 creating=3',
             'I1207 replica_set.go:668] "Too few replicas" replicaSet="kube-system/coredns" need=1 creating=1',
             'I1207 reflector.go:1261] "Warning: event bookmark expired" err="... hasn\'t received required bookmark"',
             'E1207 "Plugin Failed" err="pod a-0 is already assigned to node \\"n1\\"" pod="wlv/a-0"',
             "I1207 an unrelated line about wlv/a"]
    got = B.signs(lines, ("wlv",))
    assert got["counts"] == {"Too few replicas": 1, "already assigned": 1, "required bookmark": 1,
                             "Plugin Failed": 1}
    assert got["lines"] == [lines[0], lines[2], lines[3]]
    assert B.signs(lines * 50, ("wlv",), most=5)["lines"] == [lines[0], lines[2], lines[3], lines[0], lines[2]]
