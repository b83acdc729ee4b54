"""The bounded grammar trials are drawn from: matches weighted toward a scheduler's narrow waist,
fault kinds from a swarm subset, count triggers at quantiles of the load, every rule bounded.

Every choice goes through one `random.Random`, so a genome is a function of that stream alone."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from kube_fault_proxy.proxy.faults import KINDS, FaultSpec
from kube_fault_proxy.proxy.faults.base import Draw
from kube_fault_proxy.rig.search.genome import Genome, Rule
from kube_fault_proxy.rig.search.waist import SCHEDULER, Waist

# Each kind carries its part of the grammar (proxy/faults/: its group, whether it is drawn unless named, the
# ranges of its settings); the groups below follow the registry's order.
SPECS: dict[str, type[FaultSpec]] = {k.kind: k for k in KINDS}


def _group(group: str, default: bool) -> tuple[str, ...]:
    return tuple(k.kind for k in KINDS if k.search_group == group and k.searched_by_default == default)


REQUEST_KINDS = _group("request", True)  # abort, throttle, delay, hang, reset, commitThenFail
WATCH_KINDS = _group("watch", True)  # expire, cut, dropEvents, duplicateEvents
CONNECTION_KINDS = _group("connection", True)  # outage, resetUpstream
ALL_KINDS = REQUEST_KINDS + WATCH_KINDS + CONNECTION_KINDS  # a search's kinds unless told (--kinds)
# Perturbed views (Sieve's stale and unobserved states, and crashes at a point): known to the grammar,
# searched when named with --kinds. Not in the default set, so a seeded search draws the very trials it drew
# before they came.
VIEW_KINDS = tuple(k.kind for k in KINDS if not k.searched_by_default)
KNOWN_KINDS = ALL_KINDS + VIEW_KINDS
# Where each kind is drawn (which requests, which count a trigger counts) is the target's waist (waist.py): a
# scheduler's Bindings, or kube-controller-manager's pod creates. Every function below takes the waist; its
# default is a scheduler's, so a seeded scheduler search draws the very trials it drew before there were two.
# A trial switches its profile on after the scheduler has started and opened its watches, and a watch rule
# acts on a watch opened after that (its request decides it): these kinds make the scheduler open its
# watches again.
REOPEN_KINDS = ("resetUpstream", "outage", "crashPoint")
# Seen on the rig (docs/records/view-kinds-short-searches-2026-12-03.md): after a resetUpstream both schedulers
# relist through a WatchList, as after a restart; after an outage YuniKorn and kube-controller-manager resumed
# their watches from their revision, which an `expire` turns into a relist.
RELIST_KINDS = ("resetUpstream", "crashPoint")
RESUME_KINDS = ("outage",)
QUANTILES = (0.01, 0.05, 0.2, 0.5, 0.9)  # of the load's pods: where a count trigger arms a rule


def swarm(rng: random.Random, kinds: Sequence[str]) -> list[str]:
    """A random non-empty subset of the allowed kinds (each kept with p = 0.5): swarm testing."""
    chosen = [k for k in kinds if rng.random() < 0.5]
    return chosen or [rng.choice(list(kinds))]


def _match_for(rng: random.Random, kind: str, waist: Waist) -> tuple[str, dict[str, Any]]:
    if kind in waist.view_matches:
        options = [m for m in waist.matches if m[0] in waist.view_matches[kind]]
    elif kind in WATCH_KINDS:
        options = [m for m in waist.matches if m[3]]
    elif kind in REQUEST_KINDS:
        options = [m for m in waist.matches if not m[3] and (kind != "commitThenFail" or m[0] in waist.writes)]
    else:
        options = list(waist.matches)
    name, selector, _, _ = rng.choices(options, weights=[m[2] for m in options])[0]
    return name, {k: list(v) for k, v in selector.items()}


def _fault(rng: random.Random, kind: str, match_name: str = "", waist: Waist = SCHEDULER) -> dict[str, Any]:
    """One fault kind's settings, drawn by the kind itself (`FaultSpec.draw`)."""
    spec = SPECS.get(kind)
    if spec is None:
        raise ValueError(f"unknown fault kind {kind!r}")
    return spec.draw(rng, Draw(match_name, waist.hold_until))


def _anchor(waist: Waist) -> dict[str, Any]:
    """A copy of the waist's anchor match (a count trigger's, a companion's)."""
    return {k: list(v) for k, v in waist.anchor.items()}


def _crash_when(rng: random.Random, pods: int, waist: Waist = SCHEDULER) -> dict[str, Any]:
    """A crash point: at the Nth Binding sent (a quantile of the load), once it commits. Arrivals, not 2xx
    answers: YuniKorn sends a scheduling cycle's Bindings together, before the first answer comes back."""
    count = max(1, round(pods * rng.choice(QUANTILES)))
    return {"trigger": {"match": _anchor(waist), "count": count}, "maxInjections": 1}


def _when(rng: random.Random, kind: str, pods: int, waist: Waist = SCHEDULER) -> dict[str, Any]:
    """Timing; always bounded (maxInjections or a window) so every fault is over before the check."""
    when: dict[str, Any] = {}
    if rng.random() < 0.45:
        count = max(1, round(pods * rng.choice(QUANTILES)))
        when["trigger"] = {"match": _anchor(waist), "count": count}
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


def _watch_when(rng: random.Random) -> dict[str, Any]:
    """Timing of a rule on watches: none but a bound. Its watch is opened when something reopens the scheduler's
    watches (REOPEN_KINDS), once per resource, so a count of watch requests (`afterMatches`, `every`), a trigger
    a reopen may come before, or a late window would leave it nothing to act on."""
    return {"maxInjections": rng.choice([1, 2, 5])}


def rule(rng: random.Random, kind: str, pods: int, index: int, waist: Waist = SCHEDULER) -> Rule:
    """One rule of the given kind."""
    match_name, selector = _match_for(rng, kind, waist)
    on_watches = selector.get("verbs") == ["watch"]
    out: Rule = {"name": f"r{index}-{kind.lower()}-{match_name}"}
    if selector:
        out["match"] = selector
    if kind not in ("dropEvents", "duplicateEvents", "crashPoint") and not on_watches and rng.random() < 0.4:
        out["probability"] = rng.choice([0.5, 0.3, 0.1])
    out["when"] = (_crash_when(rng, pods, waist) if kind == "crashPoint" else _watch_when(rng) if on_watches
                   else _when(rng, kind, pods, waist))
    out["fault"] = {kind: _fault(rng, kind, match_name, waist)}
    return out


def _on_watches(r: Rule) -> bool:
    return (r.get("match") or {}).get("verbs") == ["watch"]


def _relisted(r: Rule) -> bool:
    """A staleList rule on watches: it acts only on a WatchList, a relist."""
    return next(iter(r["fault"])) == "staleList" and _on_watches(r)


def _reopens(r: Rule, kinds: Sequence[str] = REOPEN_KINDS, waist: Waist = SCHEDULER) -> bool:
    """A rule of these kinds that surely acts on the load: on the waist's anchor (Bindings) or any request,
    promptly, every time."""
    match, when = r.get("match") or {}, r.get("when") or {}
    return (next(iter(r["fault"])) in kinds and match in ({}, waist.anchor) and "probability" not in r
            and not {"afterMatches", "every", "after"} & set(when))


def _takes(r: Rule) -> str:
    """Which of a resource's watch requests a watch rule decides: the relists (WatchList), the resumed watches, any."""
    kind = next(iter(r["fault"]))
    return "relist" if kind == "staleList" else "resumed" if kind == "expire" else "any"


def _one_per_watch(rules: Sequence[Rule]) -> list[Rule]:
    """The rules with those on watches kept only where each can decide a request, in draw order. A reopen gives
    each resource one watch request: a resumed watch (a dropped connection) or a relist (a restart). An `expire`
    takes the resumed one and makes a relist; a staleList takes a relist; another watch kind takes any, and
    shadows what comes after it. Ordered so each decides one: per resource the rule on relists, then the one on
    resumed watches, then the one on any watch (the first rule that matches a request decides it)."""
    claims = {"relist": {"relist", "any"}, "resumed": {"resumed"}, "any": {"any", "relist"}}
    claimed: set[tuple[str, str]] = set()
    kept = []
    for r in rules:
        if _on_watches(r):
            mine = {(res, c) for res in r["match"].get("resources", ["*"]) for c in claims[_takes(r)]}
            if mine & claimed:
                continue
            claimed |= mine
        kept.append(r)
    order = {"relist": 0, "resumed": 1, "any": 2}
    return sorted(kept, key=lambda r: order[_takes(r)] if _on_watches(r) else -1)


def _companion(rng: random.Random, kind: str, pods: int, resources: Sequence[str], waist: Waist = SCHEDULER) -> Rule:
    """A rule that reopens the target's watches (or, `expire`, turns a resumed one into a relist)."""
    at = waist.matches[0][0]  # the anchor's name (binding, pod-create)
    name = {"resetUpstream": f"resetupstream-{at}", "outage": f"outage-{at}", "crashPoint": f"crashpoint-{at}",
            "expire": f"expire-{resources[0][:-1] if len(resources) == 1 else 'workload'}-watch"}[kind]
    if kind == "crashPoint":
        return {"name": f"r9-{name}", "match": _anchor(waist),
                **{"when": _crash_when(rng, pods, waist)}, "fault": {"crashPoint": _fault(rng, "crashPoint")}}
    if kind == "expire":
        return {"name": f"r9-{name}", "match": {"verbs": ["watch"], "resources": list(resources)},
                "when": {"maxInjections": 1}, "fault": {"expire": {"onlyRewatch": True}}}
    when: dict[str, Any] = {"maxInjections": 1}
    if rng.random() < 0.5:  # at the first Binding, or at one a quantile of the load in
        when["trigger"] = {"match": _anchor(waist), "count": max(1, round(pods * rng.choice(QUANTILES)))}
    fault = {"outage": {"seconds": 1.0, "refuse": rng.choice(["close", "refuse"])}} if kind == "outage" else {kind: {}}
    return {"name": f"r9-{name}", "match": _anchor(waist), "when": when, "fault": fault}


def reopened(rng: random.Random, rules: Sequence[Rule], kinds: Sequence[str], pods: int,
             waist: Waist = SCHEDULER) -> list[Rule]:
    """The rules, with what lets a watch rule among them act (drawn from the asked kinds): a rule that reopens the
    scheduler's watches when none does, a staleList on watches a relist (a restart, or `expire` on the resumed
    watch), an `expire` a dropped connection. At most 4 rules: the watch rule and its companions are kept, the
    last others dropped (twice over: what the first companion kept may need one too)."""
    return _reopened_once(rng, _reopened_once(rng, rules, kinds, pods, waist), kinds, pods, waist)


def _reopened_once(rng: random.Random, rules: Sequence[Rule], kinds: Sequence[str], pods: int,
                   waist: Waist) -> list[Rule]:
    """One pass of `reopened`: the first watch rule that cannot act gets its companions."""
    rules = _one_per_watch(rules)
    watched = [r for r in rules if _on_watches(r) and next(iter(r["fault"])) != "expire"]
    expiring = next((r for r in rules if _on_watches(r) and next(iter(r["fault"])) == "expire"), None)
    if not watched and expiring is None:
        return rules
    extra: list[Rule] = []
    needing = watched[0] if watched else expiring
    stale = next((r for r in watched if _relisted(r)), None)
    expires = any(next(iter(r["fault"])) == "expire" for r in rules)
    resumed = any(_reopens(r, RESUME_KINDS, waist) for r in rules)
    relists = any(_reopens(r, RELIST_KINDS, waist) for r in rules) or (resumed and expires)
    relisting = [k for k in RELIST_KINDS if k in kinds]
    if stale is not None and not relists and (relisting or ("expire" in kinds and "outage" in kinds)):
        needing, resources = stale, [str(r) for r in stale["match"].get("resources", ["pods"])]
        if relisting and (not ("expire" in kinds and "outage" in kinds) or rng.random() < 0.7):
            extra = [_companion(rng, rng.choices(relisting, [1 if k == "crashPoint" else 2 for k in relisting])[0],
                                pods, resources, waist)]
        else:
            if not resumed:
                extra.append(_companion(rng, "outage", pods, resources, waist))
            if not expires:
                extra.append(_companion(rng, "expire", pods, resources, waist))
    elif expiring is not None and not resumed and "outage" in kinds:  # expire acts on a resumed watch: an outage
        needing, extra = expiring, [_companion(rng, "outage", pods, ["pods"], waist)]
    elif not any(_reopens(r, waist=waist) for r in rules) and (anyhow := [k for k in REOPEN_KINDS if k in kinds]):
        # a restart is the slow reopen (kill -9 and start): drawn one time in five when a dropped connection may be
        extra = [_companion(rng, rng.choices(anyhow, [1 if k == "crashPoint" else 2 for k in anyhow])[0], pods,
                            ["pods"], waist)]
    if not extra:
        return rules
    helpers = [r for r in rules if r is not needing and (_reopens(r, waist=waist)
                                                           or next(iter(r["fault"])) == "expire")]
    others = helpers + [r for r in rules if r is not needing and r not in helpers]
    kept = {id(r) for r in [needing, *others[:max(0, 3 - len(extra))]]}
    return [r for r in rules if id(r) in kept] + extra


def rule_count(rng: random.Random) -> int:
    """1-4 rules, geometric-ish (mean about 2)."""
    return min(4, 1 + sum(1 for _ in range(3) if rng.random() < 0.45))


def random_genome(rng: random.Random, kinds: Sequence[str], pods: int, shapes: Sequence[str] = ("roomy",),
                  waist: Waist = SCHEDULER) -> Genome:
    """A fresh genome: a swarm subset of kinds, 1-4 rules, maybe a workload action, a workload shape
    (drawn last, and only when there is a choice, so a roomy-only stream is the old one)."""
    enabled = swarm(rng, kinds)
    rules = tuple(reopened(rng, [rule(rng, rng.choice(enabled), pods, i + 1, waist)
                                 for i in range(rule_count(rng))], kinds, pods, waist))
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
           shapes: Sequence[str] = ("roomy",), waist: Waist = SCHEDULER) -> Genome:
    """One mutation of a corpus entry: change a rule, add one, drop one, splice, move a trigger; with a
    choice of shapes, one in ten changes the workload shape instead."""
    if len(shapes) > 1 and rng.random() < 0.1:
        return parent.with_(shape=rng.choice([s for s in shapes if s != parent.shape] or list(shapes)),
                            origin="mutate:shape")
    rules = list(parent.rules)
    op = rng.choice(["regen", "add", "drop", "splice", "trigger", "action", "seed"])
    if op == "regen" and rules:
        i = rng.randrange(len(rules))
        rules[i] = rule(rng, rng.choice(list(kinds)), parent.pods, i + 1, waist)
    elif op == "add" and len(rules) < 4:
        rules.append(rule(rng, rng.choice(list(kinds)), parent.pods, len(rules) + 1, waist))
    elif op == "drop" and len(rules) > 1:
        rules.pop(rng.randrange(len(rules)))
    elif op == "splice" and other is not None and other.rules and len(rules) < 4:
        rules.append(dict(rng.choice(other.rules)))
    elif op == "trigger" and (timed := [i for i, r in enumerate(rules) if not _on_watches(r)]):
        i = rng.choice(timed)  # a rule on watches acts on the watch a reopen opens: no trigger of its own
        when = dict(rules[i].get("when") or {})
        count = max(1, round(parent.pods * rng.choice(QUANTILES)))
        when["trigger"] = {"match": _anchor(waist), "count": count}
        rules[i] = {**rules[i], "when": when}
    elif op == "action":
        return parent.with_(action=rng.choice([None, "touchPods", "deletePods"]), origin=f"mutate:{op}")
    else:
        return parent.with_(seed=rng.randrange(1, 2**31), origin="mutate:seed")
    rules = [r for r in rules if str(next(iter(r["fault"]))) in kinds] or [rule(rng, rng.choice(list(kinds)),
                                                                                   parent.pods, 1, waist)]
    rules = reopened(rng, rules, kinds, parent.pods, waist)
    return parent.with_(rules=_renamed(rules), origin=f"mutate:{op}")


def trial_rng(search_seed: int, trial: int) -> random.Random:
    """The choice stream of one trial: a function of (search seed, trial number) only."""
    return random.Random(f"kfp-search:{search_seed}:{trial}")
