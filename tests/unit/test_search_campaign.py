"""A search campaign as an Indexed Job: the Job's manifest, the workers' log records, which attempt of an index the
coordinator takes, and the coordinator serving two workers' records (one index retried) to the engine, confirming
their hits and saying where each trial ran; on fake trials, no sockets."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kube_fault_proxy.rig.search import campaign, engine, worker_log
from kube_fault_proxy.rig.search.campaign import Coordinator, WorkerSearch, global_number
from kube_fault_proxy.rig.search.engine import Search
from kube_fault_proxy.rig.search.genome import Genome, fault_kind
from kube_fault_proxy.rig.search.job_manifest import INDEX_ANNOTATION, Campaign, deadline, job, worker_seed
from kube_fault_proxy.rig.search.on_cluster import attempt_of, job_state
from kube_fault_proxy.rig.search.outcome import UNFAULTED, Settings
from kube_fault_proxy.rig.search.output import write
from kube_fault_proxy.rig.search.trial import SEARCH, Tier, TrialResult
from kube_fault_proxy.rig.search.worker_log import Attempt


def settings(out: Path, **more: Any) -> Settings:
    fields: dict[str, Any] = {"scheduler": "kube-scheduler", "control": UNFAULTED, "budget": 3600, "seed": 5,
                              "kinds": ("abort", "reset", "delay"), "out": out, "state_dir": out / "state",
                              "profiles_dir": out, "nodes": 5, "pods": 40, "shrink_budget": 30, "replays": 2}
    return Settings(**{**fields, **more})


# --- the Job


def test_the_job_is_indexed_retried_per_index_and_unprivileged(tmp_path: Path) -> None:
    s = settings(tmp_path, max_trials=9, budget=120)
    c = Campaign(name="kfp-search-5", namespace="chaos", workers=8, parallelism=2, retries_per_index=3,
                 cpu="750m", memory="2Gi", node_selector={"type": "real"})
    doc = job(s, c)
    spec = doc["spec"]
    assert (doc["apiVersion"], doc["kind"], doc["metadata"]["namespace"]) == ("batch/v1", "Job", "chaos")
    assert spec["completionMode"] == "Indexed" and spec["completions"] == 8 and spec["parallelism"] == 2
    assert spec["backoffLimitPerIndex"] == 3 and "backoffLimit" not in spec  # a failed index does not fail the rest
    assert spec["activeDeadlineSeconds"] == deadline(s, c) == 4 * 4 * (120 + 300)  # 4 waves of 4 attempts
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"  # backoffLimitPerIndex needs it: the Job retries, not the kubelet
    assert pod["nodeSelector"] == {"type": "real"}
    # the token serves one purpose: reading the index's records (a retried worker resumes from them)
    assert pod["serviceAccountName"] == "kfp-search-5-worker" and pod["automountServiceAccountToken"] is True
    (container,) = pod["containers"]
    assert container["resources"] == {"requests": {"cpu": "750m", "memory": "2Gi"}, "limits": {"memory": "2Gi"}}
    security = container["securityContext"]
    assert security["runAsNonRoot"] and security["capabilities"] == {"drop": ["ALL"]}
    assert not security["allowPrivilegeEscalation"] and "privileged" not in security
    args = container["args"]
    assert args[:2] == ["search", "--worker"]
    flags = dict(zip(args[2::2], args[3::2], strict=False))
    assert flags["--seed"] == "5" and flags["--budget"] == "120s" and flags["--control"] == "none"
    assert flags["--max-trials"] == "9" and flags["--nodes"] == "5" and flags["--kinds"] == "abort,reset,delay"
    env = {e["name"]: e for e in container["env"]}
    assert env["KFP_CACHE_DIR"]["value"] == "/opt/kfp-cache"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    # the index comes from the Job controller (JOB_COMPLETION_INDEX): nothing in the template names one
    assert "JOB_COMPLETION_INDEX" not in env and INDEX_ANNOTATION not in json.dumps(doc)


def test_feature_gates_reach_the_workers_and_the_seeds_and_numbers_are_apart(tmp_path: Path) -> None:
    s = settings(tmp_path, feature_gates={"kube-scheduler": {"SchedulerAsyncAPICalls": True}})
    args = job(s, Campaign(name="x"))["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--feature-gates") + 1] == "kube-scheduler:SchedulerAsyncAPICalls=true"
    assert [worker_seed(5, i) for i in range(3)] == [5, 6, 7]
    numbers = {global_number(i, j, 3) for i in range(3) for j in range(10)}
    assert numbers == set(range(30))  # every worker's steps, none shared


@pytest.mark.parametrize("bad", [dict(workers=0), dict(parallelism=0), dict(retries_per_index=-1)])
def test_a_campaign_refuses_nonsense(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        Campaign(name="x", **bad)


# --- the log


def test_records_come_back_whole_long_ones_in_pieces_a_cut_one_dropped() -> None:
    long = {"name": "t1", "tokens": [f"pod-{i}:abort>reset>{i * 7919}" for i in range(3000)]}
    lines = [*worker_log.record_lines(0, {"name": "t0"}), "a note of the search",
             *worker_log.record_lines(1, long), *worker_log.record_lines(2, {"name": "c2"})[:0]]
    assert len(worker_log.record_lines(1, long)) > 1 and all(len(x) < 16384 for x in lines)
    cut = worker_log.record_lines(3, long)[:-1]  # the pod ended mid-record
    text = "\n".join([*lines, *cut, worker_log.done_line({"index": 1, "steps": 2})]) + "\n"
    log = worker_log.parse(text)
    assert [r["name"] for r in log.records] == ["t0", "t1"] and log.records[1] == long
    assert log.done == {"index": 1, "steps": 2}


def test_a_log_read_back_shorter_keeps_the_earlier_read() -> None:
    seen = worker_log.WorkerLog([{"name": "t0"}, {"name": "t1"}])
    assert worker_log.longer(seen, worker_log.WorkerLog()) is seen  # a deleted pod's log read back empty
    grown = worker_log.WorkerLog([{"name": "t0"}, {"name": "t1"}, {"name": "t2"}])
    assert worker_log.longer(seen, grown) is grown
    closed = worker_log.WorkerLog([{"name": "t0"}, {"name": "t1"}], {"steps": 2})
    assert worker_log.longer(seen, closed) is closed


def test_an_index_takes_its_successful_attempt_else_the_one_that_got_furthest() -> None:
    def attempt(index: int, pod: str, phase: str, records: int, done: bool) -> Attempt:
        log = worker_log.WorkerLog([{"name": f"t{k}"} for k in range(records)], {"steps": records} if done else None)
        return Attempt(index, pod, "kfp-real-node", phase, log)

    failed = attempt(1, "w-1-a", "Failed", 7, False)
    retried = attempt(1, "w-1-b", "Succeeded", 4, True)
    taken = worker_log.chosen([attempt(0, "w-0-a", "Succeeded", 5, True), failed, retried,
                               attempt(2, "w-2-a", "Failed", 2, False), attempt(2, "w-2-b", "Failed", 3, False)])
    assert {i: a.pod for i, a in taken.items()} == {0: "w-0-a", 1: "w-1-b", 2: "w-2-b"}


def test_a_pod_is_read_as_an_attempt_and_a_job_as_ended() -> None:
    pod = {"metadata": {"name": "w-1-x", "annotations": {INDEX_ANNOTATION: "1"}}, "spec": {"nodeName": "n"},
           "status": {"phase": "Failed", "startTime": "T0", "containerStatuses": [
               {"state": {"terminated": {"exitCode": 143, "reason": "Error", "finishedAt": "T1"}}}]}}
    a = attempt_of(pod, worker_log.WorkerLog())
    assert (a.index, a.pod, a.node, a.phase, a.reason, a.finished) == (1, "w-1-x", "n", "Failed", "Error, exit 143",
                                                                       "T1")
    assert job_state({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}) == "Complete"
    assert job_state({"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
                                                 "message": "m"}]}}) == "Failed (DeadlineExceeded: m)"
    assert job_state({"status": {}}) is None


# --- workers and the coordinator


REAL_RIG = Search.rig


class FakeRigs:
    """Stands in for every control plane: each trial is instant; a profile with an abort strands pods."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ran: list[str] = []
        monkeypatch.setattr(Search, "rig", lambda s, scheduler: self._rig(s, scheduler))
        monkeypatch.setattr(engine, "run_trial", self.run_trial)

    def _rig(self, search: Search, scheduler: str) -> Any:
        search.builds[scheduler] = f"{scheduler} v1.36.3"
        return SimpleNamespace(scheduler=scheduler, cluster=SimpleNamespace(processes={}))

    def run_trial(self, rig: Any, genome: Genome, name: str, tier: Tier = SEARCH, note: Any = None) -> TrialResult:
        self.ran.append(name)
        broken = ["stranded"] if "abort" in {fault_kind(r) for r in genome.rules} else []
        return TrialResult(name, rig.scheduler, genome, broken=broken, injections=3 if genome.rules else 0,
                           fired={r["name"] for r in genome.rules}, tokens={f"{genome.digest()}"}, seconds=2.0)


def worker_log_text(tmp_path: Path, index: int, pod: str, steps: int) -> str:
    """What worker `index`'s pod logs for a search of `steps` steps (on FakeRigs: never a control plane here)."""
    assert Search.rig is not REAL_RIG, "FakeRigs(monkeypatch) first: a unit test starts no control plane"
    lines: list[str] = []
    s = settings(tmp_path / pod, seed=worker_seed(5, index), max_trials=steps, control=None, fresh=True)
    w = WorkerSearch(s, index, pod, "kfp-real-node", lambda _: None, lines.append)
    out = w.run()
    assert not out.findings and all(h.verdict != "confirmed" for h in out.hits)  # the coordinator's to confirm
    return "\n".join([*lines, w.closing(out)]) + "\n"


def test_the_coordinator_confirms_two_workers_hits_and_says_where_each_trial_ran(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rigs = FakeRigs(monkeypatch)
    full = {i: worker_log.parse(worker_log_text(tmp_path, i, f"w-{i}", 12)) for i in (0, 1)}
    assert rigs.ran == [f"{p}{k}" for k in range(12) for p in ("c" if k == 9 else "t",)] * 2  # only search steps
    # index 1 was retried: its first pod failed after 5 trials (its log cut there), the second succeeded
    evicted = worker_log.WorkerLog(full[1].records[:5])
    attempts = [Attempt(0, "w-0", "kfp-real-node", "Succeeded", full[0]),
                Attempt(1, "w-1-evicted", "kfp-real-node", "Failed", evicted, reason="Error, exit 143"),
                Attempt(1, "w-1", "kfp-real-node", "Succeeded", full[1])]
    c = Campaign(name="kfp-search-5", workers=2)
    workers = campaign.worker_records(attempts, 5, 2)
    assert [(w.index, w.seed, w.attempt.pod, w.steps) for w in workers] == [(0, 5, "w-0", 12), (1, 6, "w-1", 12)]

    rigs.ran.clear()
    out_dir = tmp_path / "campaign"
    s = settings(out_dir, budget=60)

    feed = campaign.Feed(lambda: (attempts, True), 5, 2)

    def checkpoint(o: Any) -> None:
        write(o, ["search", "--on-cluster"])
        campaign.write_campaign(o, feed.workers(), attempts, c, 300.0)

    out = Coordinator(s, feed, c, 300.0, lambda _: None, checkpoint=checkpoint).run()
    assert [(w.index, w.attempt.pod, w.steps) for w in feed.workers()] == [(0, "w-0", 12), (1, "w-1", 12)]
    # every search step came from the workers' records; the coordinator ran only replays, controls and shrinks
    assert not [n for n in rigs.ran if n[:1] in "tc" and n[1:].isdigit()]
    assert len(out.trials) + len(out.canaries) == 24
    names = {t.name for t in [*out.trials, *out.canaries]}
    assert names == {f"t{n}" for n in range(24)} - {"t18", "t19"} | {"c18", "c19"}  # step 9 of each: a canary
    hits = [h for h in out.hits if h.verdict == "confirmed"]
    assert {h.trial % 2 for h in hits} == {0, 1} and out.findings and all(f"t{h.trial}-replay" in rigs.ran for h in hits)
    by_name = {t.name: t for t in out.trials}
    assert all(by_name[f"t{h.trial}"].broken == h.broken for h in out.hits)  # each hit is its worker's trial
    doc = json.loads((out_dir / "campaign.json").read_text())
    assert doc["taken"] == {"0": "w-0", "1": "w-1"} and doc["seeds"] == {"0": 5, "1": 6}
    assert doc["trials"]["t7"] == {"index": 1, "pod": "w-1", "node": "kfp-real-node", "step": 3}
    assert doc["trials"]["t6"]["index"] == 0 and doc["trials"]["t6"]["step"] == 3
    assert [a["pod"] for a in doc["attempts"]] == ["w-0", "w-1-evicted", "w-1"]
    report = (out_dir / "report.md").read_text()
    assert "## Where the trials ran" in report
    assert "| 1 | 6 | w-1 | kfp-real-node | 12 |" in report
    assert "w-1-evicted (Failed, Error, exit 143, 5 records seen)" in report
    first = hits[0].trial
    assert f"t{first}: index {first % 2}, step {first // 2}, pod w-{first % 2}" in report
    assert "Resumed:" not in report  # the workers' records are the campaign's, not a resume
    trials = [json.loads(x) for x in (out_dir / "trials.jsonl").read_text().splitlines()]
    assert {t["worker"]["pod"] for t in trials if "worker" in t} == {"w-0", "w-1"}


def test_a_record_of_another_draw_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    FakeRigs(monkeypatch)
    log = worker_log.parse(worker_log_text(tmp_path, 0, "w-0", 3))
    feed = campaign.Feed(lambda: ([Attempt(0, "w-0", None, "Succeeded", log)], True), 6, 1)  # not seed 5
    out = tmp_path / "c"
    from kube_fault_proxy.rig.search.resume import ResumeError

    with pytest.raises(ResumeError):
        Coordinator(settings(out, seed=6), feed, Campaign(name="x", workers=1), 1.0, lambda _: None).run()


class FakeKubectl:
    """kubectl as the real node answered it: index 1's first pod deleted mid-run (its log read back empty while it
    terminated), a second pod for index 1, then the Job Complete."""

    def __init__(self, existing: dict[str, Any] | None = None) -> None:
        self.tick = 0
        self.created: list[dict[str, Any]] = []
        self.applied: list[dict[str, Any]] = []
        self.deleted: list[tuple[str, ...]] = []
        self.existing = existing

    @staticmethod
    def pod(name: str, index: int, phase: str, exit_code: int | None = None) -> dict[str, Any]:
        state = {"running": {}} if exit_code is None else {"terminated": {"exitCode": exit_code, "reason": "Error"}}
        return {"metadata": {"name": name, "annotations": {INDEX_ANNOTATION: str(index)}},
                "spec": {"nodeName": "kfp-real-node"}, "status": {"phase": phase, "containerStatuses": [
                    {"state": state}]}}

    def pods(self) -> list[dict[str, Any]]:
        first = [self.pod("w-0", 0, "Running"), self.pod("w-1-a", 1, "Running")]
        if self.tick == 0:
            return first
        if self.tick == 1:
            return [first[0], self.pod("w-1-a", 1, "Failed", 143), self.pod("w-1-b", 1, "Running")]
        return [self.pod("w-0", 0, "Succeeded", 0), self.pod("w-1-b", 1, "Succeeded", 0)]  # w-1-a gone

    def logs(self, name: str) -> str:
        records = {"w-0": 3 + self.tick, "w-1-a": 2 if self.tick == 0 else 0, "w-1-b": self.tick}[name]
        lines = [x for k in range(records) for x in worker_log.record_lines(k, {"name": f"t{k}"})]
        if self.tick >= 2 and name != "w-1-a":
            lines.append(worker_log.done_line({"steps": records}))
        return "\n".join(lines) + "\n"

    def run(self, *args: str, stdin: str | None = None, timeout: float = 60) -> str:
        if args[0] == "create":
            self.created.append(json.loads(stdin or "{}"))
            return json.dumps({**self.created[-1], "metadata": {**self.created[-1]["metadata"], "uid": "u-1"}})
        if args[0] == "apply":
            assert "--server-side" in args  # a client-side apply would copy 1 MiB of records into an annotation
            self.applied.append(json.loads(stdin or "{}"))
            return ""
        if "--ignore-not-found" in args and "job" in args:
            return json.dumps(self.existing) if self.existing else ""
        if "delete" in args:
            self.deleted.append(args[args.index("delete") + 1:])
            return ""
        if "logs" in args:
            return self.logs(args[args.index("logs") + 1])
        raise AssertionError(args)

    def json(self, *args: str) -> dict[str, Any]:
        if "pods" in args:
            return {"items": self.pods()}
        done = self.tick >= 2
        self.tick += 1
        return {"status": {"conditions": [{"type": "Complete", "status": "True"}] if done else []}}


def test_the_follower_keeps_every_attempt_and_what_a_deleted_pod_said(tmp_path: Path) -> None:
    from kube_fault_proxy.rig.search.on_cluster import JobFollower

    k = FakeKubectl()
    notes: list[str] = []
    now = [0.0]
    follower = JobFollower(k, Campaign(name="kfp-search-5", workers=2), notes.append)  # type: ignore[arg-type]
    ran = follower.follow(settings(tmp_path, budget=60), clock=lambda: now[0],
                          sleep=lambda dt: now.__setitem__(0, now[0] + dt))
    follower.delete()
    assert k.created[0]["spec"]["completionMode"] == "Indexed"
    assert k.deleted == [("job", "kfp-search-5", "--cascade=background", "--wait=false"),
                         ("configmaps,rolebindings,roles,serviceaccounts", "-l",
                          "kube-fault-proxy.io/campaign=kfp-search-5", "--wait=false")]
    assert ran.ended == "Complete" and ran.seconds == 10.0  # two polls of 5 s
    got = {a.pod: (a.index, a.phase, len(a.log.records), a.log.done is not None) for a in ran.attempts}
    assert got == {"w-0": (0, "Succeeded", 6, True), "w-1-a": (1, "Failed", 2, False),
                   "w-1-b": (1, "Succeeded", 3, True)}
    assert {i: a.pod for i, a in worker_log.chosen(ran.attempts).items()} == {0: "w-0", 1: "w-1-b"}
    assert any("w-1-b Running" in n for n in notes) and "Complete after 10 s" in notes[-1]


# --- the open ends: unfinished indexes, retried indexes, attaching, eviction


def test_indexes_that_never_finished_are_named_and_make_the_exit_code_non_zero(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from kube_fault_proxy.cli import search_campaign
    from kube_fault_proxy.cli.search import summary

    rigs = FakeRigs(monkeypatch)

    def clean(rig: Any, genome: Genome, name: str, tier: Tier = SEARCH, note: Any = None) -> TrialResult:
        return replace(rigs.run_trial(rig, genome, name, tier, note), broken=[])  # nothing to confirm

    monkeypatch.setattr(engine, "run_trial", clean)
    full = worker_log_text(tmp_path, 0, "w-0", 4)
    first_of_1 = worker_log.parse(worker_log_text(tmp_path, 1, "w-1-a", 1)).records[0]

    class OneIndexFails(FakeKubectl):
        """Index 0 ends its search; index 1's only pod is evicted after one record, and the Job ends Failed."""

        def pods(self) -> list[dict[str, Any]]:
            w1 = self.pod("w-1-a", 1, "Failed", 143)
            w1["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True",
                                           "reason": "EvictionByEvictionAPI"}]
            return [self.pod("w-0", 0, "Succeeded", 0), w1]

        def logs(self, name: str) -> str:
            if name == "w-0":
                return full
            return "\n".join(worker_log.record_lines(0, first_of_1)) + "\n"

        def json(self, *args: str) -> dict[str, Any]:
            if "pods" in args:
                return {"items": self.pods()}
            return {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "FailedIndexes",
                                               "message": "Job has failed indexes"}]}}

    k = OneIndexFails()
    monkeypatch.setattr(search_campaign, "Kubectl", lambda kubeconfig: k)
    out_dir = tmp_path / "campaign"
    args = SimpleNamespace(kubeconfig=None, keep_job=False)
    code = search_campaign.coordinate(settings(out_dir, budget=60), Campaign(name="kfp-search-5", workers=2),
                                      args, summary, sleep=lambda _: time.sleep(0.01))  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert code == search_campaign.INCOMPLETE == 3
    assert "1 index(es) did not finish" in err
    assert "index 1: w-1-a Failed (disrupted: EvictionByEvictionAPI; Error, exit 143), 1 records" in err
    assert "index 0" not in err.split("did not finish")[1]  # index 0 finished
    report = (out_dir / "report.md").read_text()
    assert "**Not finished**: index(es) 1 " in report
    doc = json.loads((out_dir / "campaign.json").read_text())
    assert campaign.unfinished(doc["attempts"], 2) == {1: "w-1-a Failed (disrupted: EvictionByEvictionAPI; Error, "
                                                          "exit 143), 1 records"}
    assert campaign.unfinished(doc["attempts"], 3)[2] == "no pod ran"
    assert k.deleted[0][:2] == ("job", "kfp-search-5")  # the Job ended: deleted


def test_a_confirmed_violation_keeps_exit_1_beside_an_unfinished_index() -> None:
    attempts = [Attempt(0, "w-0", None, "Running", worker_log.WorkerLog([{"name": "t0"}])).as_dict()]
    assert campaign.unfinished(attempts, 1) == {0: "w-0 Running, 1 records"}
    message = campaign.unfinished_message("kfp-search-5", {0: "w-0 Running, 1 records"})
    assert message.startswith("campaign kfp-search-5: 1 index(es) did not finish") and "index 0: w-0" in message


def test_a_retried_index_resumes_its_own_trials_from_the_records_the_coordinator_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from kube_fault_proxy.cli import search_campaign
    from kube_fault_proxy.rig.search.on_cluster import JobFollower

    rigs = FakeRigs(monkeypatch)
    full = worker_log.parse(worker_log_text(tmp_path, 1, "w-1-a", 12))  # what an unbroken index 1 would say
    # the first pod of index 1 ran 5 steps and was deleted; the coordinator read them and kept them in a ConfigMap
    k = FakeKubectl()
    c = Campaign(name="kfp-search-5", workers=2)
    follower = JobFollower(k, c, lambda _: None)  # type: ignore[arg-type]
    follower.uid = "u-1"
    follower.seen = {"w-1-a": Attempt(1, "w-1-a", "n1", "Failed", worker_log.WorkerLog(full.records[:5]))}
    follower.keep_records()
    (kept,) = k.applied
    assert kept["metadata"]["name"] == c.records_map(1) == "kfp-search-5-records-1"
    assert kept["metadata"]["ownerReferences"][0]["uid"] == "u-1"  # deleting the Job deletes it
    follower.keep_records()
    assert len(k.applied) == 1  # nothing new: not written again

    # the retry: the same index, a new pod, its records read with the pod's service account
    for name, value in {"JOB_COMPLETION_INDEX": "1", "JOB_NAME": c.name, "JOB_NAMESPACE": "default",
                        "POD_NAME": "w-1-b", "NODE_NAME": "n2"}.items():
        monkeypatch.setenv(name, value)
    read: list[tuple[str, str]] = []

    def records(namespace: str, name: str) -> str:
        read.append((namespace, name))
        return str(kept["data"]["records"])

    rigs.ran.clear()
    s = settings(tmp_path / "w-1-b", max_trials=12, control=None)
    assert search_campaign.worker(s, read_records=records) == 0
    assert read == [("default", "kfp-search-5-records-1")]
    assert rigs.ran == ["t5", "t6", "t7", "t8", "c9", "t10", "t11"]  # its own trials from step 5 on, none again
    log = worker_log.parse(capsys.readouterr().out)
    assert [r["name"] for r in log.records] == [r["name"] for r in full.records]
    assert [r["digest"] for r in log.records] == [r["digest"] for r in full.records]  # the same search, continued
    assert [r["worker"]["pod"] for r in log.records] == ["w-1-a"] * 5 + ["w-1-b"] * 7
    assert log.done is not None and log.done["steps"] == 12

    # the coordinator takes the retry's log whole: every step served, each said to have run where it ran
    attempts = [Attempt(1, "w-1-a", "n1", "Failed", worker_log.WorkerLog(full.records[:5])),
                Attempt(1, "w-1-b", "n2", "Succeeded", log)]
    (w,) = campaign.worker_records(attempts, 5, 2)
    assert w.attempt.pod == "w-1-b" and w.steps == 12
    assert [x["worker"]["pod"] for x in w.lines[4:6]] == ["w-1-a", "w-1-b"]
    # where a record says it ran (its pod's NODE_NAME) wins over the attempt's node
    assert w.lines[0]["worker"] == {"index": 1, "pod": "w-1-a", "node": "kfp-real-node", "step": 0}
    assert w.lines[6]["worker"] == {"index": 1, "pod": "w-1-b", "node": "n2", "step": 6}


def test_a_worker_starts_over_when_its_records_cannot_be_read_or_are_another_search(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from kube_fault_proxy.cli import search_campaign
    from kube_fault_proxy.rig.search.on_cluster import CampaignError

    rigs = FakeRigs(monkeypatch)
    other = worker_log_text(tmp_path, 0, "w-0", 3)  # index 0's records (seed 5), offered to index 1 (seed 6)
    assert campaign.earlier_records(other, 6, "kube-scheduler") == []
    assert len(campaign.earlier_records(other, 5, "kube-scheduler")) == 3
    assert campaign.earlier_records(other, 5, "yunikorn") == []
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "1")
    monkeypatch.setenv("JOB_NAME", "kfp-search-5")

    def forbidden(namespace: str, name: str) -> str:
        raise CampaignError("kubectl get configmap: Forbidden")

    rigs.ran.clear()
    assert search_campaign.worker(settings(tmp_path / "w", max_trials=2, control=None), read_records=forbidden) == 0
    assert rigs.ran == ["t0", "t1"]
    captured = capsys.readouterr()
    assert "starts its search over: kubectl get configmap: Forbidden" in captured.err
    assert len(worker_log.parse(captured.out).records) == 2


def _job_as_stored(s: Settings, c: Campaign, created: str) -> dict[str, Any]:
    doc = job(s, c)
    doc["metadata"] |= {"uid": "u-9", "creationTimestamp": created}
    return doc


def test_running_the_coordinator_again_attaches_to_its_job(tmp_path: Path) -> None:
    from datetime import datetime

    from kube_fault_proxy.rig.search.on_cluster import JobFollower

    s = settings(tmp_path, budget=60)
    c = Campaign(name="kfp-search-5", workers=2)
    k = FakeKubectl(existing=_job_as_stored(s, c, "2026-12-06T20:00:00Z"))
    notes: list[str] = []
    follower = JobFollower(k, c, notes.append)  # type: ignore[arg-type]
    now = [0.0]
    wall = datetime.fromisoformat("2026-12-06T20:02:00+00:00").timestamp()
    ran = follower.follow(s, clock=lambda: now[0], sleep=lambda dt: now.__setitem__(0, now[0] + dt),
                          wall=lambda: wall)
    assert not k.created and follower.uid == "u-9" and follower.attached
    assert any("attached to job default/kfp-search-5, made 120 s ago" in n for n in notes)
    assert [d["kind"] for d in k.applied[0]["items"]] == ["ServiceAccount", "Role", "RoleBinding"]
    assert ran.ended == "Complete" and ran.seconds == 130.0  # from the Job's creation, not this run's start


@pytest.mark.parametrize("change", ["seed", "workers", "image"])
def test_a_job_of_that_name_made_for_another_campaign_is_not_taken(tmp_path: Path, change: str) -> None:
    from kube_fault_proxy.rig.search.on_cluster import CampaignError, JobFollower

    s = settings(tmp_path, budget=60)
    c = Campaign(name="kfp-search-5", workers=2)
    theirs = {"seed": (replace(s, seed=99), c), "workers": (s, replace(c, workers=3)),
              "image": (s, replace(c, image="registry.example/kfp-worker:0.1"))}[change]
    k = FakeKubectl(existing=_job_as_stored(*theirs, created="2026-12-06T20:00:00Z"))
    with pytest.raises(CampaignError, match=r"job default/kfp-search-5 exists and was made for another campaign"):
        JobFollower(k, c, lambda _: None).start(s)  # type: ignore[arg-type]
    assert not k.created


def test_an_evicted_worker_is_retried_without_spending_its_retries(tmp_path: Path) -> None:
    doc = job(settings(tmp_path), Campaign(name="x", retries_per_index=1))
    rules = doc["spec"]["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert rules[1]["action"] == "FailIndex" and rules[1]["onExitCodes"]["values"] == [2]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in
           doc["spec"]["template"]["spec"]["containers"][0]["env"] if "valueFrom" in e}
    assert env["JOB_NAME"] == "metadata.labels['batch.kubernetes.io/job-name']"
    assert env["JOB_INDEX_FAILURES"] == "metadata.annotations['batch.kubernetes.io/job-index-failure-count']"
    pod = FakeKubectl.pod("x-0-a", 0, "Failed", 137)
    pod["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]
    assert attempt_of(pod, worker_log.WorkerLog()).reason == "disrupted: EvictionByEvictionAPI; Error, exit 137"


def test_the_workers_may_read_their_records_and_nothing_else(tmp_path: Path) -> None:
    from kube_fault_proxy.rig.search.job_manifest import worker_rbac

    c = Campaign(name="kfp-search-5", namespace="chaos", workers=3)
    account, role, binding = worker_rbac(c)
    assert account["metadata"] == {"name": "kfp-search-5-worker", "namespace": "chaos",
                                   "labels": job(settings(tmp_path), c)["metadata"]["labels"]}
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"],
                              "resourceNames": ["kfp-search-5-records-0", "kfp-search-5-records-1",
                                                "kfp-search-5-records-2"]}]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "kfp-search-5-worker", "namespace": "chaos"}]
    theirs = replace(c, service_account="ci-runner")
    assert worker_rbac(theirs) == []  # named by --worker-service-account: made by its owner
    assert job(settings(tmp_path), theirs)["spec"]["template"]["spec"]["serviceAccountName"] == "ci-runner"


def test_hits_are_confirmed_while_the_job_still_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rigs = FakeRigs(monkeypatch)
    full = worker_log.parse(worker_log_text(tmp_path, 0, "w-0", 12))
    rigs.ran.clear()
    first_hit = next(k for k, r in enumerate(full.records) if r["broken"])
    shown = [0]  # records the pod's log has said so far; one more each time the coordinator looks
    at_replay: list[tuple[int, bool]] = []

    def now() -> tuple[list[Attempt], bool]:
        shown[0] = min(shown[0] + 1, len(full.records))
        done = shown[0] == len(full.records)
        log = worker_log.WorkerLog(full.records[:shown[0]], {"steps": 12} if done else None)
        return [Attempt(0, "w-0", "n", "Succeeded" if done else "Running", log)], False  # the Job runs on

    feed = campaign.Feed(now, 5, 1, sleep=lambda _: None)
    real = engine.run_trial

    def watching(rig: Any, genome: Genome, name: str, tier: Tier = SEARCH, note: Any = None) -> TrialResult:
        if name.endswith("-replay") and not at_replay:
            at_replay.append((shown[0], now()[0][0].complete))
        return real(rig, genome, name, tier, note)

    monkeypatch.setattr(engine, "run_trial", watching)
    out = Coordinator(settings(tmp_path / "c", budget=60), feed, Campaign(name="x", workers=1), 0.0,
                      lambda _: None).run()
    assert at_replay and at_replay[0][0] <= first_hit + 3  # replayed as soon as its record came, not at the end
    assert at_replay[0][1] is False  # the worker was still running
    assert len(out.trials) + len(out.canaries) == 12  # and then every later step, as it came
    assert not [n for n in rigs.ran if n[:1] in "tc" and n[1:].isdigit()]  # no search step run here


def test_a_retry_that_started_over_does_not_continue_what_was_taken(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    FakeRigs(monkeypatch)
    full = worker_log.parse(worker_log_text(tmp_path, 0, "w-0", 4))
    other = [{**r, "digest": f"other-{k}"} for k, r in enumerate(full.records)]  # a fresh draw, not a resume
    first = Attempt(0, "w-0-a", "n", "Failed", worker_log.WorkerLog(full.records[:2]))
    retry = Attempt(0, "w-0-b", "n", "Succeeded", worker_log.WorkerLog(other, {"steps": 4}))
    seen = [[first]]  # while the Job runs, the coordinator takes the first attempt's two steps
    feed = campaign.Feed(lambda: (seen[0], len(seen[0]) == 2), 5, 1)
    assert feed.step(0, 0) is not None and feed.step(0, 1) is not None
    seen[0] = [first, retry]  # then the retry ends, its search drawn from step 0 again; the Job ends
    assert feed.step(0, 2) is None  # its step 2 follows other steps than the ones taken: the index ends at 2
    assert [(w.attempt.pod, w.steps) for w in feed.workers()] == [("w-0-a", 2)]
    # had the coordinator not taken any step yet, the retry's whole search would be taken
    fresh = campaign.Feed(lambda: ([first, retry], True), 5, 1)
    assert [fresh.step(0, k)["digest"] for k in range(4)] == [f"other-{k}" for k in range(4)]  # type: ignore[index]


def test_the_guides_coordinator_role_is_what_the_coordinator_does() -> None:
    import yaml
    from kube_fault_proxy.rig.search.job_manifest import COORDINATOR_RULES, worker_rbac

    guide = (Path(__file__).parents[2] / "docs/guides/search-on-cluster.md").read_text()
    block = guide.split("```yaml\n", 1)[1].split("```", 1)[0]
    role = yaml.safe_load(block)
    assert role["kind"] == "Role" and role["rules"] == COORDINATOR_RULES
    granted = {(g, r, v) for rule in COORDINATOR_RULES for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    # every kind the coordinator makes or deletes, and the rights the workers' Role hands on (no escalation)
    for doc in worker_rbac(Campaign(name="x")):
        group = doc["apiVersion"].rpartition("/")[0]
        assert {(group, doc["kind"].lower() + "s", v) for v in ("create", "patch", "delete", "list")} <= granted
    (rule,) = worker_rbac(Campaign(name="x"))[1]["rules"]
    assert {("", "configmaps", v) for v in rule["verbs"]} <= granted
