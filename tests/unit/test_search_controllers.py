"""kube-controller-manager as a search target: the grammar draws its rules on the controllers' requests (pod creates
and deletes, status writes, the pod and workload watches) and counts pod creates, a trial's plan is data, the command
line takes `--target kube-controller-manager[:kinds]` with its stale-controller gates off as the default control, and
the known-findings catalogue files kubernetes#129795 by the gate."""

from __future__ import annotations

from pathlib import Path

import pytest
from kube_fault_proxy.cli.main import main, parser
from kube_fault_proxy.cli.search import _settings
from kube_fault_proxy.rig.search import known, precheck
from kube_fault_proxy.rig.search.controller_trial import WORKLOAD_KINDS, plan
from kube_fault_proxy.rig.search.genome import Genome, fault_kind, valid
from kube_fault_proxy.rig.search.grammar import KNOWN_KINDS, mutate, random_genome, trial_rng
from kube_fault_proxy.rig.search.outcome import Settings
from kube_fault_proxy.rig.search.waist import BINDING, CONTROLLERS, POD_CREATE, SCHEDULER

KCM = "kube-controller-manager"
KINDS = tuple(k for k in KNOWN_KINDS if k not in CONTROLLERS.no_kinds)
STALE = ("StaleControllerConsistencyDaemonSet", "StaleControllerConsistencyJob",
         "StaleControllerConsistencyReplicaSet", "StaleControllerConsistencyStatefulSet")


def kcm_genomes(n: int) -> list[Genome]:
    return [random_genome(trial_rng(7, i), KINDS, 40, ("roomy",), CONTROLLERS) for i in range(n)]


def test_every_controller_genome_is_valid_and_drawn_on_the_controllers_requests() -> None:
    genomes = kcm_genomes(400)
    selectors = [sel for _, sel, _, _ in CONTROLLERS.matches]
    kinds, matches = set(), set()
    for g in genomes:
        assert valid(g), g.canonical()
        for r in g.rules:
            kinds.add(fault_kind(r))
            match = r.get("match") or {}
            assert match != BINDING and match.get("subresources") != ["binding"], r  # no scheduler here
            assert match in selectors, r
            matches.add(r["name"].split("-", 2)[-1])
            trigger = (r.get("when") or {}).get("trigger")
            if trigger is not None:  # a count trigger counts the pods the controllers create
                assert trigger["match"] == POD_CREATE, r
    assert "crashPoint" not in kinds and {"holdEvents", "delayEvents", "coalesceEvents", "failThenCommit"} <= kinds
    assert {"pod-create", "pod-watch", "pod-delete", "status-write", "workload-watch"} <= matches


def test_a_watch_rule_on_the_controllers_gets_a_companion_that_reopens_on_pod_creates() -> None:
    watched = [g for g in kcm_genomes(400) if any((r.get("match") or {}).get("verbs") == ["watch"] for r in g.rules)]
    assert watched
    for g in watched:  # a rule that reopens the controllers' watches, on their pod creates or on any request
        reopens = [r for r in g.rules if fault_kind(r) in ("resetUpstream", "outage")]
        assert reopens, g.canonical()
        assert any((r.get("match") or {}) in ({}, POD_CREATE) for r in reopens), g.canonical()
    assert plan(40).pods(4) == 42  # rs 8+8, web 4+4+1, jobs 4+4, db 2+2+1, agent 4


def test_mutations_of_a_controller_genome_stay_on_the_controllers_requests() -> None:
    selectors = [sel for _, sel, _, _ in CONTROLLERS.matches]
    genomes = kcm_genomes(60)
    for i, g in enumerate(genomes):
        rng = trial_rng(11, i)
        child = mutate(rng, g, KINDS, genomes[(i + 1) % len(genomes)], ("roomy",), CONTROLLERS)
        assert valid(child)
        assert all((r.get("match") or {}) in selectors for r in child.rules), child.canonical()


def test_the_scheduler_waist_is_the_default_and_draws_the_same_stream() -> None:
    for i in range(50):
        assert random_genome(trial_rng(3, i), KNOWN_KINDS, 100) == random_genome(
            trial_rng(3, i), KNOWN_KINDS, 100, ("roomy",), SCHEDULER)


def test_a_trials_plan_is_a_function_of_the_load_and_the_kinds() -> None:
    full = plan(40)
    assert [m["kind"] for m in full.manifests] == ["ReplicaSet", "Deployment", "Job", "Job", "StatefulSet",
                                                   "DaemonSet"]
    assert full == plan(40)
    moves = [(mv.kind, mv.name, mv.describe()) for rnd in full.rounds for mv in rnd]
    assert ("ReplicaSet", "rs", "scaled ReplicaSet rs to 16") in moves
    assert ("ReplicaSet", "rs", "scaled ReplicaSet rs to 4") in moves
    assert ("Deployment", "web", "rolled Deployment web out") in moves
    assert ("Pod", "db-0", "deleted Pod db-0") in moves
    assert 30 <= full.pods(4) <= 50  # about the load asked for, on the rig's 4 nodes
    jobs = plan(40, ("job",))
    assert [m["spec"].get("completionMode") for m in jobs.manifests] == [None, "Indexed"] and jobs.rounds == ()
    with pytest.raises(ValueError, match=r"unknown workload kind.*cronjob"):
        plan(40, ("replicaset", "cronjob"))


def test_a_recreate_statefulset_is_named_only_and_rolled_twice() -> None:
    """KEP-3541's StatefulSet (gate StatefulSetRecreateStrategy) is never in the default set: no v1.36.3
    apiserver accepts its strategy, and v1.37.2's only with the gate on."""
    assert "statefulset-recreate" not in {m["metadata"]["name"] for m in plan(40).manifests}
    recreate = plan(40, ("statefulset-recreate",))
    [sts] = recreate.manifests
    assert sts["spec"]["updateStrategy"] == {"type": "Recreate"} and sts["spec"]["replicas"] == 2
    moves = [mv.describe() for rnd in recreate.rounds for mv in rnd]
    assert moves == ["rolled StatefulSet cache out", "rolled StatefulSet cache out", "scaled StatefulSet cache to 3"]
    assert recreate.pods(4) == 2 + 2 + 2 + 1  # each rollout makes every pod again; the scale-up one more


def settings_of(tmp_path: Path, target: str, *more: str) -> Settings:
    return _settings(parser().parse_args(["search", "--target", target, "--budget", "1m", "-o", str(tmp_path),
                                          *more]))


def test_the_command_line_takes_kube_controller_manager_with_its_workload_kinds(tmp_path: Path) -> None:
    s = settings_of(tmp_path, f"{KCM}:replicaset,job")
    assert (s.scheduler, s.workloads, s.nodes, s.pods, s.shapes) == (KCM, ("replicaset", "job"), 4, 40, ("roomy",))
    assert s.control == "gates:" + ",".join(f"{g}=false" for g in STALE)  # the KEP-5647 code off: the control
    assert "crashPoint" not in s.kinds and set(s.kinds) <= set(KNOWN_KINDS)
    s = settings_of(tmp_path, KCM, "--feature-gates", f"{KCM}:StaleControllerConsistencyReplicaSet=false",
                    "--kinds", "all", "--nodes", "6")
    assert s.workloads == WORKLOAD_KINDS and s.nodes == 6 and "crashPoint" not in s.kinds
    assert s.control == "gates:StaleControllerConsistencyReplicaSet=true"
    assert settings_of(tmp_path, "kube-scheduler").nodes == 20  # a scheduler's defaults as before
    assert settings_of(tmp_path, "kube-scheduler", "--shapes", "gang").shapes == ("gang",)


@pytest.mark.parametrize(("argv", "said"), [
    ([f"{KCM}:cronjob"], "unknown workload kind(s) cronjob"),
    (["yunikorn:replicaset"], "only kube-controller-manager takes workload kinds"),
    (["kube-schedular"], "one of yunikorn, kube-scheduler, kube-controller-manager"),
    ([KCM, "--kinds", "crashPoint,abort"], "crashPoint: not with --target kube-controller-manager"),
    ([KCM, "--control", "kube-scheduler"], "a scheduler is no control for kube-controller-manager"),
    ([KCM, "--shapes", "tainted"], "--shapes shape a scheduler's pods"),
    (["yunikorn", "--shapes", "roomy,gang"], "--shapes gang: its gangs are PodGroups"),
    (["kube-scheduler", "--shapes", "gang", "--control", "yunikorn"], "--shapes gang: its gangs are PodGroups"),
    ([KCM, "--feature-gates", "kube-scheduler:SchedulerAsyncAPICalls=true"], "needs --target kube-scheduler"),
    (["kube-scheduler", "--feature-gates", f"{KCM}:StaleControllerConsistencyJob=false"],
     "needs --target kube-controller-manager"),
])
def test_bad_controller_targets_are_usage_errors_naming_them(argv: list[str], said: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "--target", *argv[:1], "--budget", "1m", "-o", str(tmp_path), *argv[1:]]) == 2
    assert said in capsys.readouterr().err


def test_stale_list_is_drawn_to_fire_on_every_target_whose_revisions_the_proxy_reads() -> None:
    rule = {"name": "r1-stalelist-pod-watch", "match": {"verbs": ["watch"], "resources": ["pods"]},
            "when": {"maxInjections": 1}, "fault": {"staleList": {"lagWrites": 5}}}
    reset = {"name": "r2-resetupstream-pod-create", "match": dict(POD_CREATE), "when": {"maxInjections": 1},
             "fault": {"resetUpstream": {}}}
    g = Genome(rules=(rule, reset), pods=40)
    assert precheck.can_inject(g, (), "kube-scheduler")  # a JSON client's relist: it can
    assert precheck.can_inject(g, (), KCM)  # protobuf, but its pod creates' answers carry their revision
    assert precheck.can_inject(g, (), "yunikorn")  # Bindings answered with a Status, but its pod watch is read
    lag = {**rule, "name": "r1-delayevents-pod-watch", "fault": {"delayEvents": {"seconds": 1.0}}}
    assert precheck.can_inject(Genome(rules=(lag, reset), pods=40), (), "yunikorn")  # an edited watch: asked in JSON


def test_kubernetes_129795_is_known_with_the_replicaset_gate_off_only() -> None:
    catalogue = known.catalogue(())
    g = Genome(rules=({"name": "r1-coalesceevents-pod-watch", "match": {"verbs": ["watch"], "resources": ["pods"]},
                       "when": {"maxInjections": 1}, "fault": {"coalesceEvents": {"windowSeconds": 2.0}}},), pods=40)
    off = f"{KCM} v1.36.3 StaleControllerConsistencyReplicaSet=false"
    entry = catalogue.match(["replicaset-never-over-replicas"], g, KCM, off)
    assert entry is not None and entry.id == "kubernetes-129795"
    assert catalogue.match(["replicaset-never-over-replicas"], g, KCM, f"{KCM} v1.36.3") is None  # gate on: new
    assert catalogue.match(["replicaset-never-over-replicas"], g, "kube-scheduler", off) is None
