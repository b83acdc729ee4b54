"""Node and pod churn as search trial actions: the genome carries and round-trips them (old stored genomes still
load), the grammar draws them (seeded, and not at all when none is allowed), shrinking drops and weakens them,
their trigger reads the proxy's bind count, and what a trial's actions did is undone at its clean-up."""

from __future__ import annotations

import contextlib
import json
import random
import threading
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.cli.main import main
from kube_fault_proxy.rig.actions import trial_churn
from kube_fault_proxy.rig.actions.trial_churn import ACTIONS, TrialChurn
from kube_fault_proxy.rig.actions.trial_runner import Runner
from kube_fault_proxy.rig.invariants.catalogue import Violation
from kube_fault_proxy.rig.runs.triggers import FaultRecords
from kube_fault_proxy.rig.search.genome import Genome, fault_kind, simplicity, valid
from kube_fault_proxy.rig.search.grammar import ALL_KINDS, mutate, mutate_churn, random_genome, trial_rng
from kube_fault_proxy.rig.search.shrink import candidates, shrink
from kube_fault_proxy.rig.search.trial import TrialResult
from kube_fault_proxy.rig.search.waist import BINDING

RULE = {"name": "r1-abort-binding", "match": dict(BINDING), "when": {"maxInjections": 1},
        "fault": {"abort": {"status": 500}}}
FLAP = {"do": "flapNode", "node": 3, "downSeconds": 2.0, "afterBinds": 20}
DELETE = {"do": "deleteNode", "node": 1, "afterBinds": 50, "after": 0.5}


# --- the genome -------------------------------------------------------------------------------------------------

def test_a_genome_with_trial_actions_round_trips_through_its_json() -> None:
    g = Genome(rules=(RULE,), pods=40, seed=7, nodes=3, churn=(FLAP, DELETE))
    back = Genome.from_doc(g.canonical(), "<test>")
    assert back == g and back.digest() == g.digest() and back.churn == (FLAP, DELETE)
    assert json.loads(g.canonical())["churn"] == [FLAP, DELETE]
    assert Genome.from_doc(json.loads(g.canonical()), "<test>") == g  # the object search.json's `minimal` holds
    assert g.document("x") == Genome(rules=(RULE,), seed=7).document("x")  # the profile is the rules alone
    assert g.with_(churn=()).digest() != g.digest()


def test_a_genome_stored_before_trial_actions_loads_and_keeps_its_digest() -> None:
    old = '{"action":"touchPods","pods":100,"rules":[' + json.dumps(RULE, sort_keys=True, separators=(",", ":")) \
          + '],"seed":3}'
    g = Genome.from_doc(old, "<stored>")
    assert g.churn == () and g.action == "touchPods" and g.shape == "roomy" and g.nodes is None
    assert g.canonical() == old  # no `churn` key when there is none: the digest a stored search filed it under


@pytest.mark.parametrize(("doc", "error"), [
    ({"rules": [], "pods": 1, "seed": 1, "churn": [{"do": "explodeNode", "afterBinds": 1}]},
     "<f>: churn[0]: field 'do' is 'explodeNode'; one of deleteNode, flapNode"),
    ({"rules": [], "pods": 1, "seed": 1, "churn": [{"do": "flapNode", "node": 0, "afterBinds": 1}]},
     "<f>: churn[0]: flapNode needs field 'downSeconds'"),
    ({"rules": [], "pods": 1, "seed": 1, "churn": [{"do": "deleteNode", "node": 0, "afterBinds": 0}]},
     "<f>: churn[0]: field 'afterBinds' must be an integer of at least 1, not 0"),
    ({"rules": [], "pods": 1, "seed": 1, "churn": [{"do": "deletePod", "pick": 1, "node": 2, "afterBinds": 1}]},
     "<f>: churn[0]: field 'node' is not a setting of deletePod"),
    ({"rules": [], "pods": 1, "seed": 1, "churn": [{"do": "resizeNode", "node": 0, "cpuPercent": 7,
                                                    "afterBinds": 1}]},
     "<f>: churn[0]: field 'cpuPercent' of resizeNode is 7; one of 25, 50, 200"),
    ({"rules": [], "pods": 1, "seed": 1, "churn": {"do": "deleteNode"}},
     "<f> is not a genome (its field 'churn' is not a list of actions)"),
    ({"pods": 1, "seed": 1}, "<f> is not a genome (no field 'rules')"),
    ("{", "<f> is not a genome (not JSON"),
])
def test_a_bad_stored_genome_names_where_and_the_field(doc: Any, error: str) -> None:
    with pytest.raises(ValueError) as e:
        Genome.from_doc(doc, "<f>")
    assert str(e.value).startswith(error), str(e.value)


def test_fewer_and_weaker_trial_actions_are_simpler() -> None:
    g = Genome(rules=(RULE,), churn=(DELETE,))
    weak = g.with_(churn=(trial_churn.weaker(DELETE),))
    assert simplicity(g.with_(churn=())) < simplicity(weak) < simplicity(g)
    assert simplicity(g) < simplicity(g.with_(churn=(DELETE, FLAP)))


# --- the grammar ------------------------------------------------------------------------------------------------

def test_the_grammar_draws_trial_actions_last_so_a_stream_without_them_is_the_old_one() -> None:
    with_actions = [random_genome(trial_rng(5, i), ALL_KINDS, 100, actions=ACTIONS) for i in range(120)]
    without = [random_genome(trial_rng(5, i), ALL_KINDS, 100) for i in range(120)]
    assert [g.with_(churn=()) for g in with_actions] == without  # the rules, load and seed drawn as before
    assert all(not g.churn for g in without)
    churned = [g for g in with_actions if g.churn]
    assert 35 <= len(churned) <= 85  # about half (CHURN_SHARE)
    drawn = {a["do"] for g in churned for a in g.churn}
    assert drawn == set(ACTIONS)
    triggers = {t for g in churned for a in g.churn for t in trial_churn.TRIGGERS if t in a}
    assert triggers == set(trial_churn.TRIGGERS)  # every trigger is drawn
    for g in churned:
        assert 1 <= len(g.churn) <= trial_churn.MAX_ACTIONS and valid(g)
        kinds = {fault_kind(r) for r in g.rules}
        for i, a in enumerate(g.churn):
            assert trial_churn.validate(a, f"churn[{i}]") == a
            count = a.get("afterBinds", a.get("afterBindAnswers"))
            if count is not None:  # during the load: a count of its Bindings
                assert 1 <= count <= 100
            else:  # while the faults act: one of the trial's own kinds, any, or (with a crash point) held
                assert a["onFault"] in {"any", *kinds, *({"held"} if "crashPoint" in kinds else ())}, (a, kinds)
        assert Genome.from_doc(g.canonical(), "<drawn>") == g
    again = [random_genome(trial_rng(5, i), ALL_KINDS, 100, actions=ACTIONS) for i in range(120)]
    assert again == with_actions and [g.digest() for g in again] == [g.digest() for g in with_actions]


def test_only_the_allowed_actions_are_drawn_and_mutated() -> None:
    drawn = [random_genome(trial_rng(9, i), ALL_KINDS, 60, actions=("cordonNode",)) for i in range(60)]
    assert {a["do"] for g in drawn for a in g.churn} == {"cordonNode"}
    rng = random.Random(3)
    churn: tuple[dict[str, Any], ...] = (FLAP,)
    seen = set()
    for _ in range(60):
        churn = mutate_churn(rng, churn, ("deletePod", "resizeNode"), 60)
        assert len(churn) <= trial_churn.MAX_ACTIONS
        seen |= {a["do"] for a in churn}
    assert seen == {"deletePod", "resizeNode"}  # the flap, not allowed, was dropped at the first change
    parent = Genome(rules=(RULE,), pods=60)
    mutated = [mutate(random.Random(i), parent, ALL_KINDS, actions=ACTIONS) for i in range(80)]
    assert {g.origin for g in mutated if g.churn} == {"mutate:churn"}
    assert all(not g.churn for g in (mutate(random.Random(i), parent, ALL_KINDS) for i in range(80)))


# --- shrinking --------------------------------------------------------------------------------------------------

def test_shrinking_drops_trial_actions_the_failure_does_not_need() -> None:
    start = Genome(rules=(RULE,), pods=100, churn=(FLAP, DELETE))
    assert [w for w, _ in candidates(start)][:2] == [f"drop the trial action {trial_churn.summary(FLAP)}",
                                                     f"drop the trial action {trial_churn.summary(DELETE)}"]
    done = shrink(start, lambda g: (bool(g.rules), [["stranded"]]), budget=60)
    assert done.genome.churn == ()


def test_shrinking_weakens_a_node_deletion_to_the_weakest_action_that_still_fails() -> None:
    def fails(g: Genome) -> tuple[bool, list[list[str]]]:  # any action on node 1 breaks it
        return any(a.get("node") == 1 for a in g.churn), [["I1"]]

    done = shrink(Genome(rules=(RULE,), pods=100, churn=(DELETE, FLAP)), fails, budget=60)
    assert done.genome.churn == ({"do": "cordonNode", "node": 1, "afterBinds": 50},)  # its delay not needed either
    whats = [s.what for s in done.steps if s.accepted]
    assert "trial action deleteNode -> flapNode" in whats and "trial action flapNode -> cordonNode" in whats
    assert "trial action cordonNode: no delay after its trigger" in whats


# --- the trigger ------------------------------------------------------------------------------------------------

class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def totals(succeeded: int, throttled: int = 0, failed: int = 0) -> dict[str, int]:
    """The proxy's bindsTotal."""
    return {"succeeded": succeeded, "throttled": throttled, "failed": failed}


def runner(actions: list[dict[str, Any]], binds: list[int | dict[str, int]], pods: int = 100,
           faults: FaultRecords | None = None) -> tuple[Runner, list[str], Clock]:
    """A runner on a fake stats source (the proxy's bindsTotal, read in turn; an int: that many succeeded), a fake
    journal (`faults`) and a fake clock."""
    done: list[str] = []
    notes: list[str] = []
    clock = Clock()
    reads = iter(totals(b) if isinstance(b, int) else b for b in binds)

    def perform(action: dict[str, Any], stop: threading.Event) -> str:
        done.append(action["do"])
        return f"did {action['do']}"
    r = Runner(actions, pods, lambda: next(reads), perform, notes.append, faults, clock)
    return r, notes, clock


def test_an_action_waits_for_its_count_of_bindings_from_the_load_start() -> None:
    r, notes, clock = runner([{"do": "cordonNode", "node": 0, "afterBinds": 20}], [500, 510, 519, 520])
    assert r.base == {"afterBinds": 500, "afterBindAnswers": 500}  # cumulative over trials: this trial's start here
    r.tick()
    r.tick()
    assert notes == [] and r.done == 0 and not r.settling(4.0)
    assert r.settling(4.0, binds=totals(521))  # a snapshot saw the count reached: the settle waits for the runner
    r.tick()
    assert notes == ["did cordonNode"] and r.done == 1 and r.pending == []
    assert r.settling(4.0)  # the scheduler is given the quiet time after the last action
    clock.now += 4.0
    assert not r.settling(4.0)


def test_after_delays_an_action_past_its_count_and_a_count_past_the_load_is_capped() -> None:
    r, notes, clock = runner([{"do": "deleteNode", "node": 0, "afterBinds": 500, "after": 1.0}], [0, 40, 40, 40],
                             pods=40)
    r.tick()  # 40 of 40 pods bound: reached (the count is at most the load's pods)
    assert notes == [] and r.settling(4.0)  # reached, not yet due
    clock.now += 1.0
    r.tick()
    assert notes == ["did deleteNode"]


def test_an_action_whose_count_never_comes_is_recorded_as_not_done_and_a_failure_is_recorded() -> None:
    r, notes, _ = runner([{"do": "flapNode", "node": 2, "downSeconds": 0.5, "afterBinds": 90},
                          {"do": "deletePod", "pick": 0, "afterBinds": 1}], [0, 5, 5])

    def failing(action: dict[str, Any], stop: threading.Event) -> str:
        raise ValueError("no such pod")
    r.perform = failing
    r.tick()
    assert notes == ["deletePod failed: ValueError: no such pod"] and r.done == 0
    r.finish()
    assert notes[1] == "not done: flapNode (node 2, downSeconds 0.5) after 90 Bindings (its count was not reached)"


def test_the_runner_thread_performs_during_the_load_and_finish_lets_an_action_under_way_end() -> None:
    count = [0]
    started, release = threading.Event(), threading.Event()
    notes: list[str] = []

    def perform(action: dict[str, Any], stop: threading.Event) -> str:
        started.set()
        release.wait(5)
        return "flapped"
    r = Runner([{"do": "flapNode", "node": 0, "downSeconds": 0.5, "afterBinds": 3}], 10, lambda: totals(count[0]),
               perform, notes.append)
    r.start()
    count[0] = 3
    assert started.wait(5)
    assert r.settling(0.0)  # under way
    release.set()
    r.finish()
    assert notes == ["flapped"] and not r.is_alive()


# --- what a trial's actions did, undone ---------------------------------------------------------------------------

def node(name: str, cpu: str = "4") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": f"u-{name}", "labels": {"a": "b"}},
            "spec": {}, "status": {"capacity": {"cpu": cpu, "pods": "110"}, "allocatable": {"cpu": cpu, "pods": "110"}}}


class FakeApi:
    """lightkube's Client as the actions call it: nodes and pods kept by name, every write recorded."""

    def __init__(self) -> None:
        self.nodes = {n: node(n) for n in ("kfp-node-0000", "kfp-node-0001", "kfp-node-0002")}
        self.pods = {"p-0": {"metadata": {"name": "p-0"}, "spec": {"nodeName": "kfp-node-0000"}},
                     "p-1": {"metadata": {"name": "p-1"}, "spec": {}},
                     "p-2": {"metadata": {"name": "p-2"}, "spec": {}}}
        self.writes: list[tuple[str, str]] = []

    def get(self, res: Any, name: str, **_: Any) -> dict[str, Any]:
        return self.nodes[name]

    def list(self, res: Any, **_: Any) -> list[dict[str, Any]]:
        return list((self.pods if res.__name__ == "Pod" else self.nodes).values())

    def delete(self, res: Any, name: str, **_: Any) -> None:
        self.writes.append(("delete", name))
        (self.nodes if res.__name__ == "Node" else self.pods).pop(name)

    def create(self, obj: Any, **_: Any) -> None:
        self.writes.append(("create", obj["metadata"]["name"]))
        self.nodes[obj["metadata"]["name"]] = json.loads(json.dumps(obj.to_dict()))

    def patch(self, res: Any, name: str, obj: dict[str, Any], **_: Any) -> None:
        self.writes.append(("patch", name))
        n = self.nodes[name]
        if "spec" in obj:
            n["spec"] = {k: v for k, v in {**n["spec"], **obj["spec"]}.items() if v is not None}
        if "status" in obj:
            for key, value in obj["status"].items():
                n["status"][key] = {**n["status"][key], **value}


def trial_churn_on(api: FakeApi) -> TrialChurn:
    @contextlib.contextmanager
    def connect() -> Iterator[Any]:
        yield api
    return TrialChurn(connect, ("kfp-node-0000", "kfp-node-0001"), "s-t1-1")


def test_a_trials_actions_are_undone_at_its_clean_up() -> None:
    api = FakeApi()
    before = json.loads(json.dumps(api.nodes))
    churn = trial_churn_on(api)
    stop = threading.Event()
    assert churn.perform({"do": "deleteNode", "node": 3, "afterBinds": 1}, stop) == "deleted node kfp-node-0001"
    assert churn.perform({"do": "cordonNode", "node": 0, "afterBinds": 1}, stop) == "cordoned node kfp-node-0000"
    assert churn.perform({"do": "resizeNode", "node": 2, "cpuPercent": 25, "afterBinds": 1}, stop).startswith(
        "resized node kfp-node-0000: {'cpu': '1000m'")
    assert api.nodes["kfp-node-0000"]["spec"] == {"unschedulable": True}
    assert "kfp-node-0001" not in api.nodes and set(churn.lost) == {"kfp-node-0001"}
    assert api.nodes["kfp-node-0000"]["status"]["allocatable"]["cpu"] == "1000m" and churn.shrunk == {"kfp-node-0000"}
    undone = churn.undo()
    assert undone == ["created node kfp-node-0001 again", "gave node kfp-node-0000 its capacity again",
                      "uncordoned node kfp-node-0000"]
    for name, was in before.items():  # every node back, as it was (a re-created one gets a new uid)
        now = {**api.nodes[name], "metadata": {k: v for k, v in api.nodes[name]["metadata"].items() if k != "uid"}}
        assert now["spec"] == was["spec"] and now["status"] == was["status"], name
        assert now["metadata"]["labels"] == was["metadata"]["labels"]
    assert churn.undo() == []  # nothing left to undo
    assert set(churn.lost) == {"kfp-node-0001"}  # the checker still learns the node went during the trial


def test_a_flap_and_a_timed_cordon_undo_themselves_and_leave_nothing_to_the_clean_up() -> None:
    api = FakeApi()
    churn = trial_churn_on(api)
    stop = threading.Event()
    stop.set()  # the flap's down time cut short
    assert churn.perform(FLAP, stop).startswith("flapped node kfp-node-0001: deleted, created again")
    assert churn.perform({"do": "cordonNode", "node": 0, "forSeconds": 1.0, "afterBinds": 1}, threading.Event(
    )) == "cordoned node kfp-node-0000, uncordoned it 1.0s later"
    assert "kfp-node-0001" in api.nodes and api.nodes["kfp-node-0000"]["spec"] == {}
    assert churn.undo() == []


def test_delete_pod_deletes_an_unbound_pod_of_the_trial() -> None:
    api = FakeApi()
    churn = trial_churn_on(api)
    assert churn.perform({"do": "deletePod", "pick": 3, "afterBinds": 1}, threading.Event()) == \
        "deleted pod s-t1-1/p-2"  # the 4th unbound pod of 2 by name: p-2 (p-0 is bound)
    api.pods = {}
    assert churn.perform({"do": "deletePod", "pick": 0, "afterBinds": 1}, threading.Event()) == \
        "deletePod: no unbound pod to delete"


def test_delete_pod_of_faulted_deletes_the_pod_the_fault_named_bound_or_not() -> None:
    api = FakeApi()
    churn = trial_churn_on(api)
    action = {"do": "deletePod", "pick": 5, "onFault": "hang", "of": "faulted"}
    assert churn.perform({**action, "faultedPod": "p-0"}, threading.Event()) == "deleted pod s-t1-1/p-0"
    assert "p-0" not in api.pods  # bound to a node (its Binding answer was held): deleted all the same
    assert churn.perform({**action, "faultedPod": None}, threading.Event()) == \
        "deletePod: the fault's request named no pod"


def test_a_pod_bound_to_a_node_an_action_deleted_is_left_to_podgc() -> None:
    pods = [{"metadata": {"namespace": "s", "name": "a"}, "spec": {"nodeName": "gone"}},
            {"metadata": {"namespace": "s", "name": "b"}, "spec": {"nodeName": "never-was"}}]
    violations = [Violation("missing-node", "s/a is bound to gone", ("s/a",)),
                  Violation("missing-node", "s/b is bound to never-was", ("s/b",)),
                  Violation("stranded", "s/c", ("s/c",))]
    violations += [Violation("no-overcommit", "n1 cpu", ("s/d",), "cpu", "n1"),
                   Violation("no-overcommit", "n2 cpu", ("s/e",), "cpu", "n2")]
    kept, excused = trial_churn.excuse_missing_nodes(violations, pods, {"gone": 1.0}, {"n1"})
    assert [v.objects for v in kept] == [("s/b",), ("s/c",), ("s/e",)]
    assert [(v.objects, why.split(":")[0]) for v, why in excused] == [
        (("s/a",), "a trial action deleted node gone"),
        (("s/d",), "a trial action gave node n1 less cpu than its bound pods may have had")]


def test_a_trial_line_keeps_what_its_actions_did() -> None:
    result = TrialResult("t1", "yunikorn", Genome(rules=(RULE,), churn=(FLAP,)))
    result.steps.append({"t": 1.5, "did": "flapped node kfp-node-0001: deleted, created again 2.0s later"})
    result.actions_done = 1
    line = result.as_dict()
    assert line["steps"] == ["flapped node kfp-node-0001: deleted, created again 2.0s later"]
    assert line["actionsDone"] == 1
    back = TrialResult.from_dict(line, Genome.from_doc(line["genome"], "<line>"))
    assert back.genome.churn == (FLAP,) and back.actions_done == 1
    from kube_fault_proxy.rig.search.coverage import coverage, lines

    cov = coverage([back], ("abort",), tokens=0, novel=0)
    assert cov["trialActions"] == {"flapNode": 1} and cov["trialActionsDone"] == 1
    assert "- trial actions (node and pod churn during the load) drawn: flapNode 1; done: 1" in lines(cov)


# --- the command --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("asked", "target", "expected"), [
    (None, "yunikorn", ()), ("all", "kube-scheduler", ACTIONS), ("none", "yunikorn", ()),  # opt in: none by default
    ("flapNode,cordonNode", "yunikorn", ("flapNode", "cordonNode")), (None, "kube-controller-manager", ()),
])
def test_actions_option(asked: str | None, target: str, expected: tuple[str, ...]) -> None:
    assert trial_churn.parse_actions(asked, target != "kube-controller-manager", target) == expected


@pytest.mark.parametrize(("asked", "target", "error"), [
    ("flap", "yunikorn", "no action flap"), ("deleteNode", "kube-controller-manager", "take no trial action")])
def test_a_bad_actions_option_is_refused(asked: str, target: str, error: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "--target", target, "--budget", "1m", "-o", "/tmp/kfp-unused", "--actions", asked]) == 2
    err = capsys.readouterr().err
    assert f"--actions '{asked}': " in err and error in err, err


def test_replay_runs_the_minimal_cases_trial_actions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kube_fault_proxy.cli import search as cli
    from kube_fault_proxy.rig.search.trial import Rig

    minimal = {"rules": [RULE], "pods": 20, "action": None, "seed": 1, "nodes": 2, "churn": [FLAP]}
    replayed: list[Genome] = []

    @contextlib.contextmanager
    def running(*args: object, devices: bool = False, gangs: bool = False,
                kube_scheduler_patch: Path | None = None) -> Any:
        yield types.SimpleNamespace(build="yunikorn v1.9.0")

    def trial(rig: object, genome: Genome, name: str, tier: object, note: object) -> TrialResult:
        replayed.append(genome)
        return TrialResult(name, "x", genome, broken=["I1"])

    monkeypatch.setattr(Rig, "running", running)
    monkeypatch.setattr(cli, "run_trial", trial)
    (tmp_path / "search.json").write_text(json.dumps({"minimal": minimal, "target": ["I1"], "scheduler": "yunikorn",
                                                      "nodes": 4}))
    assert main(["search", "replay", str(tmp_path), "--times", "2", "--state-dir", str(tmp_path / "s")]) == 1
    assert [g.churn for g in replayed] == [(FLAP,), (FLAP,)]
    minimal["churn"] = [{"do": "flapNode", "node": 1, "afterBinds": 3}]
    (tmp_path / "search.json").write_text(json.dumps({"minimal": minimal, "target": ["I1"], "scheduler": "yunikorn",
                                                      "nodes": 4}))
    assert main(["search", "replay", str(tmp_path), "--state-dir", str(tmp_path / "s")]) == 2
