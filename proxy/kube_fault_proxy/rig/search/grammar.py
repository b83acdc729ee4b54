"""The bounded grammar trials are drawn from: matches weighted toward a scheduler's narrow waist,
fault kinds from a swarm subset, count triggers at quantiles of the load, every rule bounded.

Every choice goes through one `random.Random`, so a genome is a function of that stream alone."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from kube_fault_proxy.rig.search.genome import Genome, Rule

REQUEST_KINDS = ("abort", "throttle", "delay", "hang", "reset", "commitThenFail")
WATCH_KINDS = ("expire", "cut", "dropEvents", "duplicateEvents")
CONNECTION_KINDS = ("outage", "resetUpstream")
ALL_KINDS = REQUEST_KINDS + WATCH_KINDS + CONNECTION_KINDS  # a search's kinds unless told (--kinds)
# Perturbed views (Sieve's stale and unobserved states, and crashes at a point): known to the grammar,
# searched when named with --kinds. Not in the default set, so a seeded search draws the very trials it drew
# before they came.
VIEW_KINDS = ("staleList", "coalesceEvents", "crashPoint", "delayEvents", "failThenCommit")
KNOWN_KINDS = ALL_KINDS + VIEW_KINDS
# Where each view kind fires: schedulers on client-go 1.36 relist through WatchList (a watch with
# sendInitialEvents), never a LIST, so staleList is drawn on watches (it acts on their WatchList relists);
# delayEvents on the watches; a write kind on the writes a trial's workload makes.
VIEW_MATCHES = {"staleList": ("pod-watch", "node-watch"), "coalesceEvents": ("pod-watch", "node-watch"),
                "crashPoint": ("binding", "pod-write"), "delayEvents": ("pod-watch", "node-watch"),
                "failThenCommit": ("binding", "pod-write")}

BINDING: dict[str, Any] = {"verbs": ["create"], "resources": ["pods"], "subresources": ["binding"]}
# (name, selector, weight, is a watch); the weights follow notes/fault-search.md §4.1.
MATCHES: tuple[tuple[str, dict[str, Any], int, bool], ...] = (
    ("binding", BINDING, 30, False),
    ("pod-watch", {"verbs": ["watch"], "resources": ["pods"]}, 20, True),
    ("pod-list", {"verbs": ["list"], "resources": ["pods"]}, 8, False),
    ("node-watch", {"verbs": ["watch"], "resources": ["nodes"]}, 6, True),
    ("node-list", {"verbs": ["list"], "resources": ["nodes"]}, 4, False),
    ("pod-write", {"verbs": ["patch", "update"], "resources": ["pods"]}, 10, False),
    ("events", {"resources": ["events"]}, 5, False),
    ("any", {}, 5, False),
)
QUANTILES = (0.01, 0.05, 0.2, 0.5, 0.9)  # of the load's pods: where a count trigger arms a rule


def swarm(rng: random.Random, kinds: Sequence[str]) -> list[str]:
    """A random non-empty subset of the allowed kinds (each kept with p = 0.5): swarm testing."""
    chosen = [k for k in kinds if rng.random() < 0.5]
    return chosen or [rng.choice(list(kinds))]


def _match_for(rng: random.Random, kind: str) -> tuple[str, dict[str, Any]]:
    if kind in VIEW_MATCHES:
        options = [m for m in MATCHES if m[0] in VIEW_MATCHES[kind]]
    elif kind in WATCH_KINDS:
        options = [m for m in MATCHES if m[3]]
    elif kind in REQUEST_KINDS:
        options = [m for m in MATCHES if not m[3] and (kind != "commitThenFail" or m[0] in ("binding", "pod-write"))]
    else:
        options = list(MATCHES)
    name, selector, _, _ = rng.choices(options, weights=[m[2] for m in options])[0]
    return name, {k: list(v) for k, v in selector.items()}


def _fault(rng: random.Random, kind: str) -> dict[str, Any]:
    """One fault kind's settings, from the ranges in notes/fault-search.md §4.1 (kept short)."""
    match kind:
        case "abort":
            spec: dict[str, Any] = {"status": rng.choice([500, 503, 504, 409, 404, 403])}
            if rng.random() < 0.3:
                spec["retryAfterSeconds"] = rng.choice([1, 5])
            return spec
        case "throttle":
            return {"retryAfterSeconds": rng.choice([1, 2, 5]), "form": rng.choice(["apf", "status"])}
        case "delay":
            seconds = round(0.05 * (60 ** rng.random()), 3)  # log-uniform over 0.05-3 s
            return {"seconds": seconds, "phase": rng.choice(["request", "response"])}
        case "hang":
            return {"seconds": float(rng.choice([1, 3, 5])), "then": rng.choice(["timeout", "reset"])}
        case "reset" | "resetUpstream":
            return {}
        case "commitThenFail":
            inner = rng.choice(["abort", "reset", "hang"])
            return {inner: {"status": rng.choice([500, 504])} if inner == "abort" else
                    {"seconds": 1.0} if inner == "hang" else {}}
        case "expire":
            return rng.choice([{}, {"onlyRewatch": True}, {"failRelist": True}])
        case "cut":
            cut: dict[str, Any] = ({"afterEvents": rng.choice([1, 10, 100])} if rng.random() < 0.6
                                   else {"afterSeconds": rng.choice([1, 5])})
            cut["error"] = rng.choice(["none", "expired", "internal"])
            return cut
        case "dropEvents" | "duplicateEvents":
            events: dict[str, Any] = {}
            if rng.random() < 0.7:
                events["types"] = sorted(rng.sample(["ADDED", "MODIFIED", "DELETED"], rng.randint(1, 2)))
            if rng.random() < 0.4:
                events["hasNodeName"] = rng.random() < 0.5
            spec = {"probability": rng.choice([0.05, 0.2, 0.5, 1.0])}
            if events:
                spec["events"] = events
            return spec
        case "outage":
            return {"seconds": float(rng.choice([1, 2, 3])), "refuse": rng.choice(["close", "refuse", "blackhole"])}
        case "staleList":  # within the history the rig's etcd keeps (10 minutes) and the writes a trial makes
            if rng.random() < 0.5:
                return {"lagSeconds": float(rng.choice([1, 2, 5, 10]))}
            return {"lagWrites": rng.choice([1, 5, 20, 100])}
        case "coalesceEvents":  # a watch lasts a window: short ones, so a trial sees several
            return {"windowSeconds": float(rng.choice([0.5, 1, 2, 5]))}
        case "crashPoint":  # the trial kills the scheduler at once, and its answer is dropped with it
            return {"holdSeconds": float(rng.choice([2, 5, 10]))}
        case "delayEvents":  # a lagging watch cache: seconds, as HA apiservers lag
            lag: dict[str, Any] = {"seconds": float(rng.choice([0.5, 1, 2, 5]))}
            if rng.random() < 0.3:
                lag["jitterSeconds"] = float(rng.choice([0.5, 1]))
            return lag
        case "failThenCommit":  # the apiserver's own request-timeout answer, the write landing after it
            first: dict[str, Any] = {"status": 504} if rng.random() < 0.8 else {"reset": True}
            return {**first, "commitAfterSeconds": float(rng.choice([0.5, 1, 3]))}
    raise ValueError(f"unknown fault kind {kind!r}")


def _crash_when(rng: random.Random, pods: int) -> dict[str, Any]:
    """A crash point: at the Nth Binding sent (a quantile of the load), once it commits. Arrivals, not 2xx
    answers: YuniKorn sends a scheduling cycle's Bindings together, before the first answer comes back."""
    count = max(1, round(pods * rng.choice(QUANTILES)))
    return {"trigger": {"match": {k: list(v) for k, v in BINDING.items()}, "count": count}, "maxInjections": 1}


def _when(rng: random.Random, kind: str, pods: int) -> dict[str, Any]:
    """Timing; always bounded (maxInjections or a window) so every fault is over before the check."""
    when: dict[str, Any] = {}
    if rng.random() < 0.45:
        count = max(1, round(pods * rng.choice(QUANTILES)))
        when["trigger"] = {"match": {k: list(v) for k, v in BINDING.items()}, "count": count}
        if rng.random() < 0.5:
            when["trigger"]["answered"] = True
    if rng.random() < 0.2:
        when["afterMatches"] = rng.choice([1, 10])
    if rng.random() < 0.2:
        when["every"] = rng.choice([2, 3, 10])
    if rng.random() < 0.25:
        when["perObjectMax"] = rng.choice([1, 2, 3])
    if rng.random() < 0.15:
        when["after"] = f"{rng.choice([0, 1, 2, 5])}s"
        when["for"] = f"{rng.choice([1, 3, 5, 10])}s"
    if "for" not in when or rng.random() < 0.5:
        when["maxInjections"] = 1 if kind in CONNECTION_KINDS and rng.random() < 0.7 else \
            rng.choice([1, 2, 5, 20, 100])
    return when


def rule(rng: random.Random, kind: str, pods: int, index: int) -> Rule:
    """One rule of the given kind."""
    match_name, selector = _match_for(rng, kind)
    out: Rule = {"name": f"r{index}-{kind.lower()}-{match_name}"}
    if selector:
        out["match"] = selector
    if kind not in ("dropEvents", "duplicateEvents", "crashPoint") and rng.random() < 0.4:
        out["probability"] = rng.choice([0.5, 0.3, 0.1])
    out["when"] = _crash_when(rng, pods) if kind == "crashPoint" else _when(rng, kind, pods)
    out["fault"] = {kind: _fault(rng, kind)}
    return out


def rule_count(rng: random.Random) -> int:
    """1-4 rules, geometric-ish (mean about 2)."""
    return min(4, 1 + sum(1 for _ in range(3) if rng.random() < 0.45))


def random_genome(rng: random.Random, kinds: Sequence[str], pods: int, shapes: Sequence[str] = ("roomy",)) -> Genome:
    """A fresh genome: a swarm subset of kinds, 1-4 rules, maybe a workload action, a workload shape
    (drawn last, and only when there is a choice, so a roomy-only stream is the old one)."""
    enabled = swarm(rng, kinds)
    rules = tuple(rule(rng, rng.choice(enabled), pods, i + 1) for i in range(rule_count(rng)))
    action = rng.choice(["touchPods", "touchPods", "deletePods"]) if rng.random() < 0.4 else None
    seed = rng.randrange(1, 2**31)
    shape = rng.choice(list(shapes)) if len(shapes) > 1 else shapes[0]
    return Genome(rules=_renamed(rules), pods=pods, action=action, seed=seed, shape=shape)


def _renamed(rules: Sequence[Rule]) -> tuple[Rule, ...]:
    """Rule names unique and numbered in order (the loader refuses a name used twice)."""
    out = []
    for i, r in enumerate(rules, 1):
        tail = r["name"].split("-", 1)[1] if "-" in r["name"] else r["name"]
        out.append({**r, "name": f"r{i}-{tail}"[:63]})
    return tuple(out)


def mutate(rng: random.Random, parent: Genome, kinds: Sequence[str], other: Genome | None = None,
           shapes: Sequence[str] = ("roomy",)) -> Genome:
    """One mutation of a corpus entry: change a rule, add one, drop one, splice, move a trigger; with a
    choice of shapes, one in ten changes the workload shape instead."""
    if len(shapes) > 1 and rng.random() < 0.1:
        return parent.with_(shape=rng.choice([s for s in shapes if s != parent.shape] or list(shapes)),
                            origin="mutate:shape")
    rules = list(parent.rules)
    op = rng.choice(["regen", "add", "drop", "splice", "trigger", "action", "seed"])
    if op == "regen" and rules:
        i = rng.randrange(len(rules))
        rules[i] = rule(rng, rng.choice(list(kinds)), parent.pods, i + 1)
    elif op == "add" and len(rules) < 4:
        rules.append(rule(rng, rng.choice(list(kinds)), parent.pods, len(rules) + 1))
    elif op == "drop" and len(rules) > 1:
        rules.pop(rng.randrange(len(rules)))
    elif op == "splice" and other is not None and other.rules and len(rules) < 4:
        rules.append(dict(rng.choice(other.rules)))
    elif op == "trigger" and rules:
        i = rng.randrange(len(rules))
        when = dict(rules[i].get("when") or {})
        count = max(1, round(parent.pods * rng.choice(QUANTILES)))
        when["trigger"] = {"match": {k: list(v) for k, v in BINDING.items()}, "count": count}
        rules[i] = {**rules[i], "when": when}
    elif op == "action":
        return parent.with_(action=rng.choice([None, "touchPods", "deletePods"]), origin=f"mutate:{op}")
    else:
        return parent.with_(seed=rng.randrange(1, 2**31), origin="mutate:seed")
    rules = [r for r in rules if str(next(iter(r["fault"]))) in kinds] or [rule(rng, rng.choice(list(kinds)),
                                                                                   parent.pods, 1)]
    return parent.with_(rules=_renamed(rules), origin=f"mutate:{op}")


def trial_rng(search_seed: int, trial: int) -> random.Random:
    """The choice stream of one trial: a function of (search seed, trial number) only."""
    return random.Random(f"kfp-search:{search_seed}:{trial}")
