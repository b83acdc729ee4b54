"""A trial action's triggers that come under faults: `afterBindAnswers` (every Binding answered, whatever the
answer) and `onFault` (the first firing of a fault, journaled by the proxy), both ways; how they validate, are
drawn, shrunk and replayed; and a seed drawn without actions is exactly the one drawn before triggers existed."""

from __future__ import annotations

import hashlib
import json
import random
import threading
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.rig.actions import trial_churn
from kube_fault_proxy.rig.actions.trial_churn import ACTIONS
from kube_fault_proxy.rig.actions.trial_runner import Runner
from kube_fault_proxy.rig.runs.journal_tail import JournalTail
from kube_fault_proxy.rig.runs.triggers import FaultRecords, binds_answered, binds_succeeded, keys
from kube_fault_proxy.rig.search.genome import Genome, fault_kind, simplicity
from kube_fault_proxy.rig.search.grammar import ALL_KINDS, mutate, mutate_churn, random_genome, trial_rng
from kube_fault_proxy.rig.search.shrink import candidates, shrink
from kube_fault_proxy.rig.search.waist import BINDING
from kube_fault_proxy.rig.workloads.shapes import SHAPES

ABORT = {"name": "r1-abort-binding", "match": dict(BINDING), "when": {"maxInjections": 1},
         "fault": {"abort": {"status": 500}}}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Journal:
    """A journal tail whose records are handed in by the test."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []

    def read(self) -> list[dict[str, Any]]:
        out, self.lines = self.lines, []
        return out


def totals(succeeded: int, throttled: int = 0, failed: int = 0) -> dict[str, int]:
    return {"succeeded": succeeded, "throttled": throttled, "failed": failed}


def make(actions: list[dict[str, Any]], binds: list[dict[str, int]], journal: Journal | None = None,
         pods: int = 100) -> tuple[Runner, list[str], Clock]:
    notes: list[str] = []
    clock = Clock()
    reads = iter(binds)

    def perform(action: dict[str, Any], stop: threading.Event) -> str:
        return f"did {action['do']}"
    faults = FaultRecords(journal) if journal is not None else None
    return Runner(actions, pods, lambda: next(reads), perform, notes.append, faults, clock), notes, clock


def inject(fault: str, rule: str = "r1-x", event: str = "inject") -> dict[str, Any]:
    return {"event": event, "fault": fault, "rule": rule, "time": 1.0, "request": {"name": "p-1"}}


# --- afterBindAnswers ---------------------------------------------------------------------------------------------

def test_the_bind_counters_read_successes_and_every_answer() -> None:
    assert binds_succeeded(totals(3, 4, 5)) == 3
    assert binds_answered(totals(3, 4, 5)) == 12


def test_after_bind_answers_fires_on_failed_binds_where_after_binds_never_would() -> None:
    # Under Binding aborts the successes stay at 10 (from 10) while the failures climb: the answers reach 20.
    reads = [totals(10, 0, 0), totals(10, 0, 5), totals(10, 2, 17), totals(10, 2, 18)]
    answers, notes, _ = make([{"do": "cordonNode", "node": 0, "afterBindAnswers": 20}], list(reads))
    answers.tick()
    assert notes == []  # 5 answered of 20
    answers.tick()
    assert notes == []  # 19 answered
    answers.tick()
    assert notes == ["did cordonNode"] and answers.done == 1
    successes, notes, _ = make([{"do": "cordonNode", "node": 0, "afterBinds": 20}], list(reads))
    for _ in range(3):
        successes.tick()
    assert notes == [] and successes.done == 0  # the same answers: not one more success
    successes.finish()
    assert notes == ["not done: cordonNode (node 0) after 20 Bindings (its count was not reached)"]


def test_a_snapshot_that_saw_the_answers_keeps_the_trial_settling() -> None:
    r, notes, _ = make([{"do": "deletePod", "pick": 1, "afterBindAnswers": 5}], [totals(0), totals(0, 0, 1)])
    r.tick()
    assert not r.settling(4.0, binds=totals(0, 1, 3))  # 4 answered of 5
    assert r.settling(4.0, binds=totals(0, 1, 4))  # 5: the runner will act at its next poll
    assert notes == []


# --- onFault ------------------------------------------------------------------------------------------------------

def test_on_fault_fires_at_the_first_record_of_its_kind_plus_its_delay() -> None:
    journal = Journal()
    r, notes, clock = make([{"do": "flapNode", "node": 1, "downSeconds": 0.5, "onFault": "abort", "after": 0.5}],
                           [totals(0)], journal)
    r.tick()
    assert notes == [] and not r.settling(0.0)
    journal.lines = [{"event": "activate"}, {"event": "outage-start"}, inject("delay"),
                     {"event": "watch-event", "fault": "abort"}]  # not an injection of an abort: not the trigger
    r.tick()
    assert notes == [] and not r.settling(0.0)
    journal.lines = [inject("abort")]
    r.tick()
    assert notes == [] and r.settling(0.0)  # reached; due half a second later
    clock.now += 0.5
    r.tick()
    assert notes == ["did flapNode"] and r.pending == []


def test_on_fault_held_waits_for_a_crash_points_held_answer_and_any_for_the_first_fault() -> None:
    journal = Journal()
    r, notes, _ = make([{"do": "deleteNode", "node": 0, "onFault": "held"},
                        {"do": "deletePod", "pick": 0, "onFault": "any"}], [totals(0)], journal)
    journal.lines = [inject("crashPoint", "r2-crash")]  # decided and committed; its answer not yet held
    r.tick()
    assert notes == ["did deletePod"]
    journal.lines = [inject("crashPoint", "r2-crash", event="crash-point")]
    r.tick()
    assert notes == ["did deletePod", "did deleteNode"]


def test_a_deletion_of_the_faulted_pod_is_told_the_pod_its_fault_named() -> None:
    journal = Journal()
    performed: list[dict[str, Any]] = []

    def perform(action: dict[str, Any], stop: threading.Event) -> str:
        performed.append(action)
        return f"did {action['do']}"
    actions = [{"do": "deletePod", "pick": 0, "onFault": "hang", "of": "faulted"},
               {"do": "deletePod", "pick": 0, "onFault": "abort", "of": "faulted"},
               {"do": "deletePod", "pick": 2, "onFault": "any"}]
    r = Runner(actions, 10, lambda: totals(0), perform, [].append, FaultRecords(journal), Clock())
    binding = {"verb": "create", "resource": "pods", "subresource": "binding", "namespace": "s-t1", "name": "load-7"}
    journal.lines = [{**inject("hang"), "request": binding},
                     {**inject("abort"), "request": {"verb": "get", "resource": "nodes", "name": "n1"}}]
    r.tick()
    assert [a.get("faultedPod", "-") for a in performed] == ["load-7", None, "-"]  # a node named: no pod
    assert performed[0]["of"] == "faulted" and actions[0] == {"do": "deletePod", "pick": 0, "onFault": "hang",
                                                              "of": "faulted"}  # the genome's action unchanged


def test_an_on_fault_action_whose_fault_never_fires_is_recorded_as_not_done() -> None:
    journal = Journal()
    r, notes, _ = make([{"do": "cordonNode", "node": 0, "onFault": "crashPoint"}], [totals(0)], journal)
    journal.lines = [inject("abort"), inject("reset")]
    r.tick()
    r.finish()
    assert notes == ["not done: cordonNode (node 0) on the first crashPoint (its fault did not fire)"]


def test_fault_records_read_the_journal_file_the_proxy_writes(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_text(json.dumps(inject("abort", "r0-before")) + "\n")  # before the load: not this trial's
    records = FaultRecords(JournalTail("http://unused", 0, path))
    with path.open("a") as f:
        f.write(json.dumps({"event": "activate"}) + "\n" + json.dumps(inject("reset", "r1-reset")) + "\n"
                + json.dumps(inject("abort", "r2-abort"))[:20])  # the proxy is writing this line still
    assert [r["rule"] for r in records.read()] == ["r1-reset"]
    assert records.fired("abort") is None and records.fired("reset") == records.fired("any")
    with path.open("a") as f:
        f.write(json.dumps(inject("abort", "r2-abort"))[20:] + "\n")
    records.read()
    assert records.fired("abort") is not None and records.fired("abort")["rule"] == "r2-abort"  # type: ignore[index]
    assert records.fired("any")["rule"] == "r1-reset"  # type: ignore[index]  # the first stays the first
    assert keys(inject("crashPoint", "r3", "crash-point")) == ["any", "crashPoint", "r3", "held"]


# --- validation ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("action", "error"), [
    ({"do": "deleteNode", "node": 0},
     "<g>: churn[0]: an action needs exactly one trigger field of afterBinds, afterBindAnswers, onFault"),
    ({"do": "deleteNode", "node": 0, "afterBinds": 3, "onFault": "abort"},
     "<g>: churn[0]: an action needs exactly one trigger field of afterBinds, afterBindAnswers, onFault "
     "(got afterBinds, onFault)"),
    ({"do": "deleteNode", "node": 0, "afterBindAnswers": 0},
     "<g>: churn[0]: field 'afterBindAnswers' must be an integer of at least 1, not 0"),
    ({"do": "deleteNode", "node": 0, "afterBindAnswers": True},
     "<g>: churn[0]: field 'afterBindAnswers' must be an integer of at least 1, not True"),
    ({"do": "deletePod", "pick": 0, "onFault": "explode"},
     "<g>: churn[0]: field 'onFault' is 'explode'; one of any, held, abort, throttle"),
    ({"do": "deletePod", "pick": 0, "onFault": 3}, "<g>: churn[0]: field 'onFault' is 3; one of any"),
    ({"do": "deletePod", "pick": 0, "afterBinds": 3, "of": "faulted"},
     "<g>: churn[0]: field 'of' of deletePod is 'faulted'; faulted, and only with an onFault trigger"),
    ({"do": "deletePod", "pick": 0, "onFault": "hang", "of": "bound"},
     "<g>: churn[0]: field 'of' of deletePod is 'bound'; faulted, and only with an onFault trigger"),
    ({"do": "deleteNode", "node": 0, "onFault": "hang", "of": "faulted"},
     "<g>: churn[0]: field 'of' is not a setting of deleteNode"),
])
def test_a_bad_trigger_names_the_field(action: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError) as e:
        Genome.from_doc({"rules": [], "pods": 1, "seed": 1, "churn": [action]}, "<g>")
    assert str(e.value).startswith(error), str(e.value)


def test_each_trigger_round_trips_through_a_stored_genome() -> None:
    churn = ({"do": "flapNode", "node": 2, "downSeconds": 0.5, "afterBindAnswers": 20},
             {"do": "deletePod", "pick": 4, "onFault": "crashPoint", "after": 1.0})
    g = Genome(rules=(ABORT,), pods=40, churn=churn)
    assert Genome.from_doc(g.canonical(), "<g>") == g
    assert [trial_churn.summary(a) for a in churn] == [
        "flapNode (node 2, downSeconds 0.5) after 20 Binding answers",
        "deletePod (pick 4) on the first crashPoint + 1.0s"]


# --- the grammar and shrinking -----------------------------------------------------------------------------------

def test_an_on_fault_trigger_names_a_kind_of_the_trials_own_rules() -> None:
    drawn = [random_genome(trial_rng(11, i), ALL_KINDS, 80, actions=ACTIONS) for i in range(200)]
    on_fault = [(a["onFault"], {fault_kind(r) for r in g.rules}) for g in drawn for a in g.churn if "onFault" in a]
    assert len(on_fault) > 20
    assert all(name in kinds or name == "any" or (name == "held" and "crashPoint" in kinds)
               for name, kinds in on_fault)
    assert any(name != "any" for name, _ in on_fault)
    parent = Genome(rules=(ABORT,), pods=60)
    mutated = [mutate_churn(random.Random(i), (), ("deletePod",), 60, ["abort"]) for i in range(40)]
    assert {a["onFault"] for m in mutated for a in m if "onFault" in a} == {"any", "abort"}
    assert all(fault_kind(r) == "abort" for r in parent.rules)


def test_shrinking_makes_a_trigger_plainer_only_while_the_failure_stays() -> None:
    start = Genome(rules=(ABORT,), pods=100,
                   churn=({"do": "cordonNode", "node": 1, "onFault": "abort", "after": 0.5},))
    whats = [w for w, _ in candidates(start)]
    assert "trial action cordonNode: no delay after its trigger" in whats
    assert "trial action cordonNode: on any fault, not abort" in whats
    plain = start.with_(churn=({"do": "cordonNode", "node": 1, "onFault": "any"},))
    assert simplicity(plain) < simplicity(start)

    def needs_the_abort(g: Genome) -> tuple[bool, list[list[str]]]:  # fails only when timed on the abort
        return any(a.get("onFault") == "abort" for a in g.churn), [["I1"]]
    done = shrink(start, needs_the_abort, budget=60)
    assert done.genome.churn == ({"do": "cordonNode", "node": 1, "onFault": "abort"},)  # the delay went, not the kind

    done = shrink(start, lambda g: (bool(g.churn), [["I1"]]), budget=60)
    assert done.genome.churn == ({"do": "cordonNode", "node": 1, "onFault": "any"},)


def test_weakening_an_action_keeps_its_trigger() -> None:
    weak = trial_churn.weaker({"do": "deleteNode", "node": 4, "afterBindAnswers": 7, "after": 1.0})
    assert weak == {"do": "flapNode", "node": 4, "downSeconds": 0.5, "afterBindAnswers": 7, "after": 1.0}
    assert trial_churn.weaker({"do": "flapNode", "node": 4, "downSeconds": 5.0, "onFault": "held"}) == \
        {"do": "cordonNode", "node": 4, "onFault": "held"}


# --- no actions: the stream of before --------------------------------------------------------------------------

# The digest of genomes drawn and mutated without trial actions (seeds 348, the cluster test's, and 5; both the
# roomy-only and the every-shape streams), computed on main before these triggers existed. A seed without
# `--actions` must draw exactly this: stored seeds and the cluster test pinning seed 348 depend on it.
WITHOUT_ACTIONS = "36bcb33017cb2fbcec837d489147244c891bca8c4bab736a95013240bf3ed6d0"


def test_a_seed_without_actions_draws_exactly_what_it_drew_before() -> None:
    out = []
    for seed in (348, 5):
        for i in range(40):
            out.append(random_genome(trial_rng(seed, i), ALL_KINDS, 100).canonical())
            out.append(random_genome(trial_rng(seed, i), ALL_KINDS, 60, tuple(SHAPES)).canonical())
    parent = random_genome(trial_rng(348, 0), ALL_KINDS, 100)
    other = random_genome(trial_rng(348, 1), ALL_KINDS, 100)
    for i in range(60):
        out.append(mutate(random.Random(i), parent, ALL_KINDS, other, tuple(SHAPES)).canonical())
    assert all('"churn"' not in c for c in out)
    assert hashlib.sha256("\n".join(out).encode()).hexdigest() == WITHOUT_ACTIONS
