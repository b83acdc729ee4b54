"""kube-scheduler on a device workload: the grammar also draws rules on the ResourceClaims it writes in PreBind
(its finalizer, the allocation in status) and on the claims' and slices' watches, and the pre-check lets them
fire on a device trial only. A search without a device shape draws what it always drew."""

from __future__ import annotations

from kube_fault_proxy.rig.search import precheck, waist
from kube_fault_proxy.rig.search.genome import Genome, Rule, fault_kind, valid
from kube_fault_proxy.rig.search.grammar import KNOWN_KINDS, random_genome, trial_rng
from kube_fault_proxy.rig.search.waist import CLAIM_WRITE, DEVICE_SCHEDULER, SCHEDULER

KINDS = tuple(k for k in KNOWN_KINDS if k not in DEVICE_SCHEDULER.no_kinds)


def test_a_device_shape_gives_kube_scheduler_the_claims_waist_and_nothing_else_does() -> None:
    assert waist.of("kube-scheduler", ("dra-binding",)) is DEVICE_SCHEDULER
    assert waist.of("kube-scheduler", ("roomy", "dra")) is DEVICE_SCHEDULER
    assert waist.of("kube-scheduler", ("roomy", "gang")) is SCHEDULER and waist.of("kube-scheduler") is SCHEDULER
    assert waist.of("yunikorn", ("dra",)) is SCHEDULER  # YuniKorn v1.9.0 writes no claim
    assert waist.of("kube-controller-manager", ("dra",)) is waist.CONTROLLERS
    # the scheduler's own matches first, with their weights: only the claims' are added
    assert DEVICE_SCHEDULER.matches[:len(SCHEDULER.matches)] == SCHEDULER.matches
    assert DEVICE_SCHEDULER.names()[len(SCHEDULER.matches):] == ("claim-write", "claim-watch", "slice-watch")


def test_device_genomes_are_valid_and_draw_claim_writes_for_write_kinds() -> None:
    genomes = [random_genome(trial_rng(44, i), KINDS, 40, ("dra-binding",), DEVICE_SCHEDULER) for i in range(400)]
    forms: dict[str, set[str]] = {}
    for g in genomes:
        assert valid(g), g.canonical()
        for r in g.rules:
            forms.setdefault(r["name"].split("-", 2)[-1], set()).add(fault_kind(r))
    assert {"claim-write", "claim-watch", "slice-watch"} <= set(forms), sorted(forms)
    # the write kinds (an abort answered instead, a late commit) are drawn on the claims' writes too
    assert {"abort", "failThenCommit", "commitThenFail"} <= forms["claim-write"], forms["claim-write"]
    assert not {"dropEvents", "staleList"} & forms["claim-write"]  # watch kinds never on a write


def _claim_rule(kind: str, spec: dict[str, object]) -> Rule:
    return {"name": f"r1-{kind.lower()}-claim-write", "match": dict(CLAIM_WRITE), "when": {"maxInjections": 1},
            "fault": {kind: spec}}


def test_the_pre_check_lets_a_claim_write_rule_fire_on_a_device_trial_only() -> None:
    rule = _claim_rule("abort", {"status": 500})
    on_devices = Genome(rules=(rule,), pods=40, shape="dra-binding")
    assert precheck.can_inject(on_devices, (), "kube-scheduler")
    assert not precheck.can_inject(Genome(rules=(rule,), pods=40, shape="roomy"), (), "kube-scheduler")
    # kube-scheduler still writes no pod while all goes well: a rule on pod writes alone cannot fire
    pod_write: Rule = {**rule, "name": "r1-abort-pod-write", "match": {"verbs": ["patch", "update"],
                                                                        "resources": ["pods"]}}
    assert not precheck.can_inject(Genome(rules=(pod_write,), pods=40, shape="dra-binding"), (), "kube-scheduler")
