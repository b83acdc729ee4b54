"""The search reads the kinds' traits, never their names: a kind-name literal in rig/search/, a kind lacking a trait
the search needs, or a target with no request for a kind it does not refuse fails here. The pinned digests say a
seeded search still draws the genomes it drew when the search named kinds."""

from __future__ import annotations

import ast
import hashlib
import random
from pathlib import Path
from typing import Any, ClassVar

import pytest
from kube_fault_proxy.proxy.faults import KINDS, Fault, FaultSpec
from kube_fault_proxy.proxy.faults.base import Draw
from kube_fault_proxy.proxy.faults.plan import EditEvents
from kube_fault_proxy.proxy.faults.traits import ACTS_ON, Traits
from kube_fault_proxy.proxy.requests.identity import parse
from kube_fault_proxy.rig.search import kinds, trial
from kube_fault_proxy.rig.search.grammar import ALL_KINDS, KNOWN_KINDS, mutate, random_genome, trial_rng
from kube_fault_proxy.rig.search.waist import CONTROLLERS, SCHEDULER, Waist

SEARCH = Path(__file__).resolve().parents[2] / "proxy" / "kube_fault_proxy" / "rig" / "search"
NAMES = {k.kind for k in KINDS}


def kind_literals(source: str) -> list[tuple[int, str]]:
    """The string constants of a module's source that are a kind's name (an f-string's pieces too)."""
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES]


def test_the_scan_finds_a_kind_name() -> None:
    source = 'X = ("resetUpstream", 1)\nif kind == "crashPoint":\n    y = f"{kind}-expire"\nz = {"staleList": 1}\n'
    assert kind_literals(source) == [(1, "resetUpstream"), (2, "crashPoint"), (4, "staleList")]
    assert kind_literals('"""A docstring naming staleList and expire."""\n# crashPoint\n') == []


@pytest.mark.parametrize("module", sorted(p.name for p in SEARCH.glob("*.py")))
def test_no_kind_name_in_the_search(module: str) -> None:
    found = kind_literals((SEARCH / module).read_text())
    assert found == [], f"rig/search/{module} names kinds (read their traits instead): {found}"


def lacking(kind: type[FaultSpec]) -> list[str]:
    """What the search needs of a kind and it does not declare (empty: nothing)."""
    traits = vars(kind).get("traits")
    if not isinstance(traits, Traits):
        return ["traits (declared by the kind itself)"]
    missing = []
    if traits.reopens is not None or traits.watch_requests == "resumed":
        try:  # the search adds a rule of it for another rule's sake
            Fault.model_validate({kind.kind: kind.companion(random.Random(1))})
        except NotImplementedError:
            missing.append("companion (it reopens watches, or takes resumed ones)")
    return missing


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_every_kind_declares_what_the_search_needs(kind: type[FaultSpec]) -> None:
    assert lacking(kind) == []


def test_a_kind_without_traits_or_companion_is_caught() -> None:
    class Bare(FaultSpec):
        kind: ClassVar[str] = "bare"
        search_group: ClassVar[str] = "request"

    class Reopener(FaultSpec):
        kind: ClassVar[str] = "reopener"
        search_group: ClassVar[str] = "connection"
        traits: ClassVar[Traits] = Traits(acts_on="any", reopens="relist")

    class Inherits(Reopener):
        kind: ClassVar[str] = "inherits"

    assert lacking(Bare) == ["traits (declared by the kind itself)"]
    assert lacking(Reopener) == ["companion (it reopens watches, or takes resumed ones)"]
    assert lacking(Inherits) == ["traits (declared by the kind itself)"]


@pytest.mark.parametrize(("field", "value"), [("acts_on", "list"), ("watch_requests", "first"),
                                              ("reopens", "restart"), ("trial_needs", frozenset({"reboot"}))])
def test_a_trait_out_of_its_values_is_refused(field: str, value: Any) -> None:
    settings: dict[str, Any] = {"acts_on": "watch", field: value}
    with pytest.raises(ValueError, match=f"traits: {field} "):
        Traits(**settings)


def test_the_search_has_a_kind_for_each_part_it_plays() -> None:
    assert kinds.RELIST_KINDS and kinds.RESUME_KINDS and kinds.RESUMED_TAKERS and kinds.EVENT_EDITORS
    assert set(kinds.REOPEN_KINDS) == set(kinds.RELIST_KINDS) | set(kinds.RESUME_KINDS)
    assert trial.EVENT_EDITORS is kinds.EVENT_EDITORS
    assert {k.traits.acts_on for k in KINDS} == set(ACTS_ON), "a value no kind uses, or one the waists do not know"


@pytest.mark.parametrize("waist", [SCHEDULER, CONTROLLERS], ids=["scheduler", "controllers"])
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_a_target_draws_every_kind_it_does_not_refuse_on_its_requests(waist: Waist, kind: type[FaultSpec]) -> None:
    if not kind.traits.trial_needs <= waist.trial_does:
        assert kind.kind in waist.no_kinds
        with pytest.raises(ValueError, match="does not kill its target"):
            waist.acting_on(kind.kind)
        return
    options = waist.acting_on(kind.kind)
    watches = {m[0] for m in waist.matches if m[3]}
    names = {m[0] for m in options}
    assert names, kind.kind
    match kind.traits.acts_on:
        case "watch":
            assert names == watches
        case "request":
            assert names == set(waist.names()) - watches
        case "write":
            assert names == set(waist.writes)
        case "resent-write":
            assert names == set(waist.resent_writes)
        case "any":
            assert names == set(waist.names())


@pytest.mark.parametrize("kind", [k for k in KINDS if k.traits.acts_on == "watch"], ids=lambda k: k.kind)
def test_a_kind_edits_events_exactly_when_each_of_its_plans_on_a_watch_does(kind: type[FaultSpec]) -> None:
    """What fired_rules reads (EVENT_EDITORS): a kind that acts through events edits them on every watch it takes;
    one that may act on the watch itself (a cut lowering its timeout) or never edits (expire) does not claim to."""
    watches = [parse("GET", "/api/v1/pods", "watch=true&resourceVersion=5"),
               parse("GET", "/api/v1/pods", "watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan")]
    edits = []
    for seed in range(40):
        spec = Fault.model_validate({kind.kind: kind.draw(random.Random(seed), Draw("pod-watch", SCHEDULER.hold_until))})
        for ident in watches:
            if spec.spec.applies_to(ident):
                plan = spec.spec.plan(ident, random.Random(seed))
                edits.append(any(isinstance(step, EditEvents) for step in (*plan.before, *plan.after)))
    assert edits, kind.kind
    assert all(edits) is kind.traits.edits_events


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown fault kind 'nope'"):
        SCHEDULER.acting_on("nope")


@pytest.mark.parametrize(("kind", "settings", "relists"), [
    ("expire", {}, True), ("expire", {"onlyRewatch": True}, True), ("cut", {"afterEvents": 1, "error": "expired"}, True),
    ("cut", {"afterEvents": 1, "error": "none"}, False), ("cut", {"afterSeconds": 5}, False),
    ("staleList", {"lagWrites": 5}, False), ("outage", {"seconds": 1.0}, False),
])
def test_what_makes_a_resumed_watch_relist(kind: str, settings: dict[str, Any], relists: bool) -> None:
    assert kinds.SPECS[kind].relists(settings) is relists


def _digest(waist: Waist, asked: tuple[str, ...], seed: int, n: int = 200) -> str:
    """Genomes drawn as a search draws them (fresh ones, and mutations of those before), hashed."""
    corpus, lines = [], []
    for i in range(n):
        rng = trial_rng(seed, i)
        if corpus and rng.random() < 0.5:
            g = mutate(rng, rng.choice(corpus), asked, rng.choice(corpus), ("roomy",), waist)
        else:
            g = random_genome(rng, asked, 40, ("roomy",), waist)
        corpus.append(g)
        lines.append(g.canonical())
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


# The kinds a search knew when the digests below were taken: a search asked for them (`--kinds`) draws what it drew,
# whatever kinds came since (a new kind, named too, is a new draw; unnamed, it changes nothing).
KNOWN_AT_73BD904 = ("abort", "throttle", "delay", "hang", "reset", "commitThenFail", "expire", "cut", "dropEvents",
                    "duplicateEvents", "outage", "resetUpstream", "staleList", "coalesceEvents", "crashPoint",
                    "delayEvents", "failThenCommit", "holdEvents")


def test_the_kinds_known_at_the_digests_are_known_first_in_their_order() -> None:
    assert KNOWN_KINDS[:len(KNOWN_AT_73BD904)] == KNOWN_AT_73BD904


@pytest.mark.parametrize(("waist", "asked", "digest"), [
    (SCHEDULER, KNOWN_AT_73BD904, "b27c5e7606b4aa31"),
    (SCHEDULER, ALL_KINDS, "714ad7ea7eae835d"),
    (CONTROLLERS, tuple(k for k in KNOWN_AT_73BD904 if k not in CONTROLLERS.no_kinds), "ccca7c3c7f6e02a1"),
], ids=["scheduler-known", "scheduler-default", "controllers-known"])
def test_a_seeded_search_draws_the_genomes_it_drew(waist: Waist, asked: tuple[str, ...], digest: str) -> None:
    assert KNOWN_KINDS[:len(KNOWN_AT_73BD904)] == KNOWN_AT_73BD904, "a kind since is added after them"
    assert _digest(waist, asked, 3) == digest
