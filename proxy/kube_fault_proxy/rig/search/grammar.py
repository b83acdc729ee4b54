"""The bounded grammar trials are drawn from: matches weighted toward a scheduler's narrow waist,
fault kinds from a swarm subset, count triggers at quantiles of the load, every rule bounded.

Every choice goes through one `random.Random`, so a genome is a function of that stream alone."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from kube_fault_proxy.proxy.faults.base import Draw
from kube_fault_proxy.rig.actions import trial_churn
from kube_fault_proxy.rig.search.genome import Genome, Rule, fault_kind
from kube_fault_proxy.rig.search.kinds import (
    ALL_KINDS,
    CONNECTION_KINDS,
    KNOWN_KINDS,
    RELIST_KINDS,
    REOPEN_KINDS,
    REQUEST_KINDS,
    RESUME_KINDS,
    RESUMED_TAKERS,
    SPECS,
    VIEW_KINDS,
    WATCH_KINDS,
    reopen_weight,
    traits,
)
from kube_fault_proxy.rig.search.waist import SCHEDULER, Waist

# Each kind carries its part of the grammar (proxy/faults/: its group, whether it is drawn unless named, the
# ranges of its settings, its traits); kinds.py reads them, and nothing here names a kind.
# Where each kind is drawn (which requests, which count a trigger counts) is the target's waist (waist.py): a
# scheduler's Bindings, or kube-controller-manager's pod creates. Every function below takes the waist; its
# default is a scheduler's, so a seeded scheduler search draws the very trials it drew before there were two.
__all__ = ["ALL_KINDS", "CONNECTION_KINDS", "KNOWN_KINDS", "QUANTILES", "RELIST_KINDS", "REOPEN_KINDS",
           "REQUEST_KINDS", "RESUME_KINDS", "SPECS", "VIEW_KINDS", "WATCH_KINDS", "mutate", "mutate_churn",
           "random_genome", "reopened", "rule", "rule_count", "swarm", "trial_rng"]
QUANTILES = (0.01, 0.05, 0.2, 0.5, 0.9)  # of the load's pods: where a count trigger arms a rule


def swarm(rng: random.Random, kinds: Sequence[str]) -> list[str]:
    """A random non-empty subset of the allowed kinds (each kept with p = 0.5): swarm testing."""
    chosen = [k for k in kinds if rng.random() < 0.5]
    return chosen or [rng.choice(list(kinds))]


def _match_for(rng: random.Random, kind: str, waist: Waist) -> tuple[str, dict[str, Any]]:
    """A match from those of the waist the kind acts on (its traits), by weight."""
    options = waist.acting_on(kind)
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
    own = traits(kind)
    if own.rule_probability and not on_watches and rng.random() < 0.4:
        out["probability"] = rng.choice([0.5, 0.3, 0.1])
    out["when"] = (_crash_when(rng, pods, waist) if own.at_a_count else _watch_when(rng) if on_watches
                   else _when(rng, kind, pods, waist))
    out["fault"] = {kind: _fault(rng, kind, match_name, waist)}
    return out


def _on_watches(r: Rule) -> bool:
    return (r.get("match") or {}).get("verbs") == ["watch"]


def _relisted(r: Rule) -> bool:
    """A rule on watches of a kind that takes relists (a stale view): it acts only on a WatchList, a relist."""
    return traits(fault_kind(r)).watch_requests == "relist" and _on_watches(r)


def _takes_resumed(r: Rule) -> bool:
    """A rule of a kind that takes resumed watches and makes them relist (expire)."""
    return fault_kind(r) in RESUMED_TAKERS


def _reopens(r: Rule, kinds: Sequence[str] = REOPEN_KINDS, waist: Waist = SCHEDULER) -> bool:
    """A rule of these kinds that surely acts on the load: on the waist's anchor (Bindings) or any request,
    promptly, every time."""
    match, when = r.get("match") or {}, r.get("when") or {}
    return (fault_kind(r) in kinds and match in ({}, waist.anchor) and "probability" not in r
            and not {"afterMatches", "every", "after"} & set(when))


def _takes(r: Rule) -> str:
    """Which of a resource's watch requests a watch rule decides: the relists (WatchList), the resumed watches, any."""
    return traits(fault_kind(r)).watch_requests


def _one_per_watch(rules: Sequence[Rule]) -> list[Rule]:
    """The rules with those on watches kept only where each can decide a request, in draw order. A reopen gives
    each resource one watch request: a resumed watch (a dropped connection) or a relist (a restart). An `expire`
    takes the resumed one and makes a relist; a stale view takes a relist; another watch kind takes any, and
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
    """A rule that reopens the target's watches (or, a kind taking resumed watches, turns one into a relist); its
    settings are the kind's own `companion`."""
    own = traits(kind)
    if own.acts_on == "watch":  # on the watches of the resources, the first one it may decide
        name = f"{kind.lower()}-{resources[0][:-1] if len(resources) == 1 else 'workload'}-watch"
        return {"name": f"r9-{name}", "match": {"verbs": ["watch"], "resources": list(resources)},
                "when": {"maxInjections": 1}, "fault": {kind: SPECS[kind].companion(rng)}}
    name = f"{kind.lower()}-{waist.matches[0][0]}"  # at the anchor (binding, pod-create)
    if own.at_a_count:
        return {"name": f"r9-{name}", "match": _anchor(waist),
                **{"when": _crash_when(rng, pods, waist)}, "fault": {kind: SPECS[kind].companion(rng)}}
    when: dict[str, Any] = {"maxInjections": 1}
    if rng.random() < 0.5:  # at the first Binding, or at one a quantile of the load in
        when["trigger"] = {"match": _anchor(waist), "count": max(1, round(pods * rng.choice(QUANTILES)))}
    return {"name": f"r9-{name}", "match": _anchor(waist), "when": when, "fault": {kind: SPECS[kind].companion(rng)}}


def reopened(rng: random.Random, rules: Sequence[Rule], kinds: Sequence[str], pods: int,
             waist: Waist = SCHEDULER) -> list[Rule]:
    """The rules, with what lets a watch rule among them act (drawn from the asked kinds): a rule that reopens the
    scheduler's watches when none does, a stale view on watches a relist (a restart, or `expire` on the resumed
    watch), an `expire` a dropped connection. At most 4 rules: the watch rule and its companions are kept, the
    last others dropped (twice over: what the first companion kept may need one too)."""
    return _reopened_once(rng, _reopened_once(rng, rules, kinds, pods, waist), kinds, pods, waist)


def _reopened_once(rng: random.Random, rules: Sequence[Rule], kinds: Sequence[str], pods: int,
                   waist: Waist) -> list[Rule]:
    """One pass of `reopened`: the first watch rule that cannot act gets its companions. A relist comes from a
    reopen the target relists after (a reset connection, a restart), or from a resuming one (an outage) together
    with a rule that turns the resumed watch into a relist (an `expire`)."""
    rules = _one_per_watch(rules)
    watched = [r for r in rules if _on_watches(r) and not _takes_resumed(r)]
    expiring = next((r for r in rules if _on_watches(r) and _takes_resumed(r)), None)
    if not watched and expiring is None:
        return rules
    extra: list[Rule] = []
    needing = watched[0] if watched else expiring
    stale = next((r for r in watched if _relisted(r)), None)
    expires = any(_takes_resumed(r) for r in rules)
    resumed = any(_reopens(r, RESUME_KINDS, waist) for r in rules)
    relists = any(_reopens(r, RELIST_KINDS, waist) for r in rules) or (resumed and expires)
    relisting = [k for k in RELIST_KINDS if k in kinds]
    resumer = next((k for k in RESUME_KINDS if k in kinds), None)  # a reopen the target resumes after
    expirer = next((k for k in RESUMED_TAKERS if k in kinds), None)  # a rule that makes the resumed watch relist
    if stale is not None and not relists and (relisting or (expirer and resumer)):
        needing, resources = stale, [str(r) for r in stale["match"].get("resources", ["pods"])]
        if relisting and (not (expirer and resumer) or rng.random() < 0.7):
            extra = [_companion(rng, rng.choices(relisting, [reopen_weight(k) for k in relisting])[0],
                                pods, resources, waist)]
        else:
            if not resumed and resumer:
                extra.append(_companion(rng, resumer, pods, resources, waist))
            if not expires and expirer:
                extra.append(_companion(rng, expirer, pods, resources, waist))
    elif expiring is not None and not resumed and resumer:  # a rule taking resumed watches needs a resuming reopen
        needing, extra = expiring, [_companion(rng, resumer, pods, ["pods"], waist)]
    elif not any(_reopens(r, waist=waist) for r in rules) and (anyhow := [k for k in REOPEN_KINDS if k in kinds]):
        # a restart is the slow reopen (kill -9 and start): drawn one time in five when a dropped connection may be
        extra = [_companion(rng, rng.choices(anyhow, [reopen_weight(k) for k in anyhow])[0], pods, ["pods"], waist)]
    if not extra:
        return rules
    helpers = [r for r in rules if r is not needing and (_reopens(r, waist=waist) or _takes_resumed(r))]
    others = helpers + [r for r in rules if r is not needing and r not in helpers]
    kept = {id(r) for r in [needing, *others[:max(0, 3 - len(extra))]]}
    return [r for r in rules if id(r) in kept] + extra


def rule_count(rng: random.Random) -> int:
    """1-4 rules, geometric-ish (mean about 2)."""
    return min(4, 1 + sum(1 for _ in range(3) if rng.random() < 0.45))


CHURN_SHARE = 0.5  # of fresh genomes, with trial actions allowed: how many carry some


def random_genome(rng: random.Random, kinds: Sequence[str], pods: int, shapes: Sequence[str] = ("roomy",),
                  waist: Waist = SCHEDULER, actions: Sequence[str] = ()) -> Genome:
    """A fresh genome: a swarm subset of kinds, 1-4 rules, maybe a workload action, a workload shape
    (drawn last, and only when there is a choice, so a roomy-only stream is the old one), then maybe node and
    pod churn of the allowed trial `actions` (drawn after all else, and only when some are allowed, so a stream
    without them is the old one)."""
    enabled = swarm(rng, kinds)
    rules = tuple(reopened(rng, [rule(rng, rng.choice(enabled), pods, i + 1, waist)
                                 for i in range(rule_count(rng))], kinds, pods, waist))
    action = rng.choice(["touchPods", "touchPods", "deletePods"]) if rng.random() < 0.4 else None
    seed = rng.randrange(1, 2**31)
    shape = rng.choice(list(shapes)) if len(shapes) > 1 else shapes[0]
    kinds_drawn = [fault_kind(r) for r in rules]  # an action's onFault names one of them (or any)
    churn = trial_churn.draw_some(rng, actions, pods, kinds_drawn) if actions and rng.random() < CHURN_SHARE else ()
    return Genome(rules=_renamed(rules), pods=pods, action=action, seed=seed, shape=shape, churn=churn)


def _renamed(rules: Sequence[Rule]) -> tuple[Rule, ...]:
    """Rule names unique and numbered in order (the loader refuses a name used twice)."""
    out = []
    for i, r in enumerate(rules, 1):
        tail = r["name"].split("-", 1)[1] if "-" in r["name"] else r["name"]
        out.append({**r, "name": f"r{i}-{tail}"[:63]})
    return tuple(out)


def mutate(rng: random.Random, parent: Genome, kinds: Sequence[str], other: Genome | None = None,
           shapes: Sequence[str] = ("roomy",), waist: Waist = SCHEDULER, actions: Sequence[str] = ()) -> Genome:
    """One mutation of a corpus entry: change a rule, add one, drop one, splice, move a trigger; with a
    choice of shapes, one in ten changes the workload shape instead; with trial actions allowed, one in eight
    changes the node and pod churn instead (no draw is spent on it otherwise)."""
    if len(shapes) > 1 and rng.random() < 0.1:
        return parent.with_(shape=rng.choice([s for s in shapes if s != parent.shape] or list(shapes)),
                            origin="mutate:shape")
    if actions and rng.random() < 0.125:
        return parent.with_(churn=mutate_churn(rng, parent.churn, actions, parent.pods,
                                               [fault_kind(r) for r in parent.rules]), origin="mutate:churn")
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


def mutate_churn(rng: random.Random, churn: Sequence[trial_churn.Action], actions: Sequence[str],
                 pods: int, kinds: Sequence[str] = ()) -> tuple[trial_churn.Action, ...]:
    """The trial actions changed: one redrawn, one added (at most MAX_ACTIONS), or one dropped. Only the allowed
    actions are kept; `kinds` (the genome's rules') are what a drawn `onFault` may name."""
    kept = [a for a in churn if a["do"] in actions]
    op = rng.choice(["redraw", "add", "drop"]) if kept else "add"
    if op == "redraw":
        kept[rng.randrange(len(kept))] = trial_churn.draw(rng, trial_churn.pick(rng, actions), pods, kinds)
    elif op == "add" and len(kept) < trial_churn.MAX_ACTIONS:
        kept.append(trial_churn.draw(rng, trial_churn.pick(rng, actions), pods, kinds))
    else:
        kept.pop(rng.randrange(len(kept)))
    return tuple(kept)


def trial_rng(search_seed: int, trial: int) -> random.Random:
    """The choice stream of one trial: a function of (search seed, trial number) only."""
    return random.Random(f"kfp-search:{search_seed}:{trial}")
