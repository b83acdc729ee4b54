"""Shrinking, Hypothesis/ddmin-style, over the profile's structure: every candidate is a genome the
strict loader accepts, and a step is taken only when it is strictly simpler (so shrinking ends)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kube_fault_proxy.rig.actions import trial_churn
from kube_fault_proxy.rig.search.genome import Genome, Rule, fault_kind, simplicity, valid
from kube_fault_proxy.rig.search.kinds import SPECS, traits

SHORTEST = {"seconds": 0.05, "lagSeconds": 0.5, "windowSeconds": 0.5, "holdSeconds": 1.0,
            "commitAfterSeconds": 0.25, "maxSeconds": 0.5}  # halving stops here
MATCH_KEYS_DROPPABLE = ("userAgents", "namespaces", "targetNodes", "names", "paths")


def ddmin[T](items: Sequence[T], fails: Callable[[list[T]], bool]) -> list[T]:
    """Zeller's ddmin: a 1-minimal sublist of `items` on which `fails` still holds (it must hold on
    all of them). Subsets first, then complements; the granularity doubles until single items."""
    current, n = list(items), 2
    while len(current) >= 2:
        size = max(1, len(current) // n)
        chunks = [current[i:i + size] for i in range(0, len(current), size)]
        for chunk in chunks:
            if fails(chunk):
                current, n = chunk, 2
                break
        else:
            for i in range(len(chunks)):
                complement = [x for j, c in enumerate(chunks) if j != i for x in c]
                if fails(complement):
                    current, n = complement, max(n - 1, 2)
                    break
            else:
                if n >= len(current):
                    break
                n = min(len(current), n * 2)
    if len(current) == 1 and fails([]):
        return []
    return current


def _with_rule(g: Genome, i: int, new: Rule) -> Genome:
    rules = list(g.rules)
    rules[i] = new
    return g.with_(rules=tuple(rules))


def _when_variants(rule: Rule) -> Iterator[Rule]:
    when = dict(rule.get("when") or {})
    for key in ("after", "afterMatches", "every", "perObjectMax", "trigger"):
        if key in when:
            w = {k: v for k, v in when.items() if k != key and not (key == "after" and k == "for")}
            if "maxInjections" not in w and "for" not in w:
                w["maxInjections"] = 1  # stay bounded
            yield {**rule, "when": w}
    trig = when.get("trigger")
    if isinstance(trig, dict):
        if trig.get("answered"):
            yield {**rule, "when": {**when, "trigger": {k: v for k, v in trig.items() if k != "answered"}}}
        count = int(trig["count"])
        for smaller in sorted({1, count // 2}):
            if 1 <= smaller < count:
                yield {**rule, "when": {**when, "trigger": {**trig, "count": smaller}}}
    if "for" in when and "maxInjections" in when:
        yield {**rule, "when": {k: v for k, v in when.items() if k not in ("after", "for")}}
    for key in ("maxInjections", "perObjectMax", "every", "afterMatches"):
        value = when.get(key)
        if isinstance(value, int):
            for smaller in sorted({1, value // 2}):
                if 1 <= smaller < value:
                    yield {**rule, "when": {**when, key: smaller}}


def _later_points(rule: Rule, pods: int) -> Iterator[Rule]:
    """A crash point's weaker form: later in the load (its count trigger doubled, at most the load's pods)."""
    when = rule.get("when") or {}
    trig = when.get("trigger")
    if not traits(fault_kind(rule)).at_a_count or not isinstance(trig, dict):
        return
    count = int(trig["count"])
    later = min(pods, count * 2)
    if later > count:
        yield {**rule, "when": {**when, "trigger": {**trig, "count": later}}}


def _probability_variants(rule: Rule) -> Iterator[Rule]:
    p = rule.get("probability")
    if p is not None and p < 1:
        yield {k: v for k, v in rule.items() if k != "probability"}  # deterministic beats probabilistic


def _match_variants(rule: Rule) -> Iterator[Rule]:
    match = dict(rule.get("match") or {})
    for key in MATCH_KEYS_DROPPABLE:
        if key in match:
            yield {**rule, "match": {k: v for k, v in match.items() if k != key}}
    verbs = match.get("verbs")
    if isinstance(verbs, list) and len(verbs) > 1:
        for v in verbs:
            yield {**rule, "match": {**match, "verbs": [v]}}


def _fault_variants(rule: Rule) -> Iterator[Rule]:
    kind = fault_kind(rule)
    spec = dict(rule["fault"][kind] or {})
    for key in ("retryAfterSeconds", "jitterSeconds", "events", "reason", "message", "error", "form", "phase",
                "then", "refuse", "onlyRewatch", "failRelist"):
        if key in spec:
            yield {**rule, "fault": {kind: {k: v for k, v in spec.items() if k != key}}}
    for key in ("seconds", "afterEvents", "afterSeconds", "lagSeconds", "lagWrites", "windowSeconds",
                "holdSeconds", "commitAfterSeconds", "maxSeconds"):  # shorter
        value = spec.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            smaller = value / 2 if isinstance(value, float) else value // 2
            if smaller > 0 and smaller >= SHORTEST.get(key, 0):
                yield {**rule, "fault": {kind: {**spec, key: smaller}}}
    p = spec.get("probability")
    if isinstance(p, float) and p < 1:
        yield {**rule, "fault": {kind: {**spec, "probability": 1.0}}}
    own = SPECS[kind]
    if own.weaker is not None:  # strong to weak (FaultSpec.weaker), ending in abort 500
        yield {**rule, "fault": {own.weaker: SPECS[own.weaker].weakest()}}
    weakest = own.weakest()
    if weakest and any(spec.get(k) != v for k, v in weakest.items()):
        yield {**rule, "fault": {kind: weakest}}


def candidates(g: Genome, load_sizes: Sequence[int] = (50, 20),
               node_sizes: Sequence[int] = (5, 2, 1)) -> Iterator[tuple[str, Genome]]:
    """Every one-step simplification of a genome, in pass order (rules are ddmin's, not here)."""
    if g.action is not None:
        yield "drop the workload action", g.with_(action=None)
    for i, action in enumerate(g.churn):  # each trial action dropped, then weakened (a deleted node flapped, ...)
        yield f"drop the trial action {trial_churn.summary(action)}", g.with_(churn=g.churn[:i] + g.churn[i + 1:])
    for i, action in enumerate(g.churn):
        if (weak := trial_churn.weaker(action)) is not None:
            yield (f"trial action {action['do']} -> {weak['do']}",
                   g.with_(churn=(*g.churn[:i], weak, *g.churn[i + 1:])))
    for i, action in enumerate(g.churn):  # its trigger simpler: no delay, any fault rather than one kind
        for what, simpler in trial_churn.simpler_triggers(action):
            yield f"trial action {what}", g.with_(churn=(*g.churn[:i], simpler, *g.churn[i + 1:]))
    if g.shape != "roomy":
        yield f"shape {g.shape} -> roomy", g.with_(shape="roomy")
    for pods in load_sizes:
        if pods < g.pods:
            yield f"load {g.pods} -> {pods} pods", g.with_(pods=pods)
    for i, rule in enumerate(g.rules):
        for new in _later_points(rule, g.pods):
            yield f"rule {rule['name']}: a later crash point", _with_rule(g, i, new)
        for what, variants in (("when", _when_variants), ("probability", _probability_variants),
                               ("fault", _fault_variants), ("match", _match_variants)):
            for new in variants(rule):
                yield f"rule {rule['name']}: simpler {what}", _with_rule(g, i, new)
    # Last: the profile is what a reader needs minimal first; the rest of the rig's nodes are
    # cordoned for the trial.
    for nodes in node_sizes:
        if g.nodes is None or nodes < g.nodes:
            yield f"nodes {g.nodes or 'all'} -> {nodes}", g.with_(nodes=nodes)


@dataclass
class Step:
    """One shrink attempt, for the log."""

    what: str
    accepted: bool
    runs: list[list[str]] = field(default_factory=list)
    seconds: float = 0.0
    genome: str = ""

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"what": self.what, "accepted": self.accepted, "runs": self.runs, "seconds": round(self.seconds, 1),
                "genome": self.genome}


@dataclass
class Shrunk:
    """The result of shrinking: the simplest genome still failing, and the log of every step."""

    genome: Genome
    steps: list[Step] = field(default_factory=list)
    out_of_budget: bool = False


Oracle = Callable[[Genome], tuple[bool, list[list[str]]]]  # (still fails, broken invariants per run)


def shrink(start: Genome, still_fails: Oracle, budget: float, clock: Callable[[], float] = time.monotonic,
           load_sizes: Sequence[int] = (50, 20), node_sizes: Sequence[int] = (5, 2, 1)) -> Shrunk:
    """ddmin over the rules, then greedy passes to a fixpoint; stops when the budget is spent. `node_sizes`: the
    schedulable node counts tried (none for a target whose trial does not cordon nodes)."""
    deadline = clock() + budget
    result = Shrunk(start)
    tried: dict[str, bool] = {}

    def attempt(what: str, cand: Genome) -> bool:
        if cand.digest() in tried:
            return tried[cand.digest()]
        if clock() >= deadline:
            result.out_of_budget = True
            return False
        t0 = clock()
        fails, runs = still_fails(cand)
        tried[cand.digest()] = fails
        result.steps.append(Step(what, fails, runs, clock() - t0, cand.canonical()))
        return fails

    current = start
    if len(current.rules) > 1:
        def rules_fail(subset: list[Rule]) -> bool:
            if not subset:
                return False  # no rule, no fault: not a profile worth reporting
            cand = current.with_(rules=tuple(subset))
            return valid(cand) and attempt(f"keep rules {', '.join(r['name'] for r in subset)}", cand)

        kept = ddmin(list(current.rules), rules_fail)
        current = current.with_(rules=tuple(kept))
    progress = True
    while progress and clock() < deadline:
        progress = False
        for what, cand in candidates(current, load_sizes, node_sizes):
            if simplicity(cand) >= simplicity(current) or not valid(cand):
                continue
            if attempt(what, cand):
                current, progress = cand, True
                break
    if clock() >= deadline:
        result.out_of_budget = True
    result.genome = current
    return result
