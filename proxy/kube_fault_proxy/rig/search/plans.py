"""Planned perturbations (`search --plan`), as in Sieve's test plans: for each causal point of a reference run
(causal.py), the perturbations that land there, each one trial's rules; the plan's order; its coverage.

What lands where, drawn from the asked kinds by their traits (never their names):
- at a write (the Nth write of its waist match, by a count trigger counting that match, armed from it on, once):
  a kind that acts at a count (a crash point right after that write); a kind acting on writes the proxy sends again
  (that write committed after its error); a kind acting on writes (that write committed, its answer lost); a kind
  acting on any request (that write failed before it reached the apiserver, or held back when the kind takes a
  duration); and a stale view of the written object at that moment: a kind acting on
  relists, on the watch of its resource, hiding the last write (one write back when the kind counts writes),
  with a relisting reopen (a crash point first) on that write; and, when the search may delete pods (`--actions`),
  the pod of a write to an existing pod deleted while that write is held: a kind that holds a request (a
  duration, at least HOLD_SECONDS), and the deletion of the pod its request named on its first firing;
- at an event the target consumed before a write: each kind that edits watch events, on the watch of its resource,
  its `events` (when it has them) set to that event's type and object, with a reopen (the cheapest asked) just
  after the last write of the same match before the event (once it was answered), so the rule decides the watch
  that carries it.

Equivalent points (same resource, verb and phase of the workload) form a group; the plan keeps `per_group` of each
(spread over the group), and runs them round-robin over the groups, so a budget that ends early has covered as many
groups as it could. At a point, the perturbations run one of each effect first (failed, held, answer lost, crash,
committed after its error, stale view, deleted while held; each edit of an event), then the second kind of each, and
the first points of the groups take turns in that order before any group's second point: a short budget tries
each effect once before it tries one effect twice. Pure: points in, a Plan out; a trial's result in, coverage
out."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from kube_fault_proxy.proxy.faults.base import Draw
from kube_fault_proxy.rig.actions.trial_churn import Action, delete_at_fault
from kube_fault_proxy.rig.search.causal import WRITE, Point, selector
from kube_fault_proxy.rig.search.genome import Genome, Rule, valid
from kube_fault_proxy.rig.search.kinds import RELIST_KINDS, REOPEN_KINDS, SPECS, traits
from kube_fault_proxy.rig.search.waist import Waist

VERSION = 1  # the plan file's format (planned.PLAN)
HOLD_SECONDS = 3.0  # at least this long a write is held while its pod is deleted (the runner polls every 50 ms)


@dataclass(frozen=True)
class Perturbation:
    """One planned trial: where it lands, its effect (`the write held back`: the plan's order takes one of each) and
    by what (the kinds, how), its rules (the first is the one that lands) and trial actions."""

    point: str
    effect: str
    by: str
    rules: tuple[Rule, ...]
    churn: tuple[Action, ...] = ()  # trial actions it performs (a pod deleted while its write is held)

    @property
    def what(self) -> str:
        """What it does, in one line: `the write held back (delay)`."""
        return f"{self.effect} ({self.by})"

    def as_dict(self) -> dict[str, Any]:
        """JSON form (`churn` only when there is some)."""
        return {"point": self.point, "what": self.what, "rules": list(self.rules),
                **({"churn": list(self.churn)} if self.churn else {})}


@dataclass
class Plan:
    """The points chosen (per group), every point seen, and the perturbations in the order they run."""

    points: list[Point]
    groups: dict[str, list[str]]  # group -> every point of it in the reference run (chosen or not)
    perturbations: list[Perturbation] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # perturbations the strict loader refused, and why none landed

    def as_dict(self) -> dict[str, Any]:
        """JSON form (the plan file)."""
        return {"version": VERSION, "points": [p.as_dict() for p in self.points], "groups": self.groups,
                "perturbations": [p.as_dict() for p in self.perturbations], "skipped": self.skipped}

    def save(self, path: Path) -> None:
        """Write the plan file."""
        path.write_text(json.dumps(self.as_dict(), indent=1))


def _rng(seed: int, point: Point, what: str) -> random.Random:
    return random.Random(f"kfp-plan:{seed}:{point.id}:{what}")


def _settings(kind: str, rng: random.Random, match: str, waist: Waist) -> dict[str, Any]:
    return SPECS[kind].draw(rng, Draw(match, waist.hold_until))


def _at_write(point: Point, waist: Waist, count: int | None = None) -> dict[str, Any]:
    """A rule's `when` for the Nth write of the point's write match: armed from it on, acting once."""
    return {"trigger": {"match": selector(waist, point.write), "count": count or point.count}, "maxInjections": 1}


def _write_rule(kind: str, point: Point, waist: Waist, settings: dict[str, Any]) -> Rule:
    """A rule of `kind` with these settings on exactly the point's write (the Nth of its match)."""
    return {"name": f"r1-{kind.lower()}-{point.match}", "match": selector(waist, point.write),
            "when": _at_write(point, waist), "fault": {kind: settings}}


def _reopen(kinds: Sequence[str], relist: bool) -> str | None:
    """The reopen a perturbation needs, among the asked kinds: a relisting one (a crash point first) for a stale
    view, else the cheapest (the registry's order, REOPEN_KINDS)."""
    pool = [k for k in (RELIST_KINDS if relist else REOPEN_KINDS) if k in kinds and traits(k).acts_on != "watch"]
    if relist:
        pool.sort(key=lambda k: not traits(k).at_a_count)
    return pool[0] if pool else None


def _reopen_rule(kind: str, point: Point, waist: Waist, count: int, rng: random.Random, at: bool = True) -> Rule:
    """A reopen of the target's watches: `at` the Nth write (that write's own request), or just after it (the first
    request of any kind once the Nth write was answered 2xx, so the counted write itself is left alone)."""
    if at:
        return {"name": f"r2-reopen-{kind.lower()}", "match": selector(waist, point.write),
                "when": _at_write(point, waist, count), "fault": {kind: SPECS[kind].companion(rng)}}
    when = {"trigger": {"match": selector(waist, point.write), "count": count, "answered": True}, "maxInjections": 1}
    return {"name": f"r2-reopen-{kind.lower()}", "when": when, "fault": {kind: SPECS[kind].companion(rng)}}


def at_write(point: Point, kinds: Sequence[str], waist: Waist, seed: int,
             actions: Sequence[str] = ()) -> list[Perturbation]:
    """The perturbations that land at a write (`actions`: the trial actions the search may perform)."""
    out: list[Perturbation] = []
    for kind in kinds:
        own, rng = traits(kind), _rng(seed, point, kind)
        if own.at_a_count and own.acts_on in ("write", "resent-write") and point.match in waist.writes:
            what = "crash right after the write"
        elif own.acts_on == "resent-write" and point.match in waist.resent_writes:
            what = "the write committed after its error"
        elif own.acts_on == "write" and point.match in waist.writes:
            what = "the write committed, its answer lost"
        elif own.acts_on == "request":
            what = "the write held back" if own.duration else "the write failed before it reached the apiserver"
        else:
            continue
        out.append(Perturbation(point.id, what, kind, (_write_rule(kind, point, waist,
                                                                   _settings(kind, rng, point.match, waist)),)))
    out += _stale(point, kinds, waist, seed)
    out += _deleted_while_held(point, kinds, waist, seed, actions)
    return out


def _deleted_while_held(point: Point, kinds: Sequence[str], waist: Waist, seed: int,
                        actions: Sequence[str]) -> list[Perturbation]:
    """The pod a write names deleted while that write is held: a write to an existing pod (not a create), held by
    each kind that holds a request for at least HOLD_SECONDS, and the pod deleted on that kind's first firing."""
    if point.resource != "pods" or point.verb == "create":
        return []
    out = []
    for kind in kinds:
        own, delete = traits(kind), delete_at_fault(kind, actions)
        if delete is None or own.acts_on != "request" or not own.duration:
            continue
        settings = _settings(kind, _rng(seed, point, f"{kind}-deleted"), point.match, waist)
        if settings.get(own.duration) is not None:
            settings[own.duration] = max(float(settings[own.duration]), HOLD_SECONDS)
        # a kind that can hold the answer instead of the request holds the answer: the write commits, the pod is
        # deleted, then its writer learns the write succeeded (a held request only fails, as a plain abort does)
        after = "response" in _choices(kind, "phase")
        if after:
            settings["phase"] = "response"
        how = ", the answer held after the commit" if after else ""
        out.append(Perturbation(point.id, "the pod deleted while its write is held", f"{kind}{how}",
                                (_write_rule(kind, point, waist, settings),), (delete,)))
    return out


def _choices(kind: str, name: str) -> tuple[Any, ...]:
    """The values a kind's setting may take, when it is a choice of literals (none otherwise)."""
    field_info = SPECS[kind].model_fields.get(name)
    return get_args(field_info.annotation) if field_info is not None else ()


def _stale(point: Point, kinds: Sequence[str], waist: Waist, seed: int) -> list[Perturbation]:
    """A stale view of the written object at the write: its resource's relist served from before the write."""
    watch = next((m[0] for m in waist.matches if m[3] and point.resource in m[1].get("resources", [])), None)
    reopen = _reopen(kinds, relist=True)
    if watch is None or reopen is None:
        return []
    out = []
    for kind in kinds:
        own = traits(kind)
        if own.acts_on != "watch" or own.watch_requests != "relist" or not own.stale_view:
            continue
        rng = _rng(seed, point, kind)
        settings = {"lagWrites": 1} if "lagWrites" in SPECS[kind].model_fields else _settings(kind, rng, watch, waist)
        stale = {"name": f"r1-{kind.lower()}-{watch}", "match": {"verbs": ["watch"], "resources": [point.resource]},
                 "when": {"maxInjections": 1}, "fault": {kind: settings}}
        out.append(Perturbation(point.id, f"a stale view of {point.resource} at the write",
                                f"{kind}, reopened by {reopen}",
                                (stale, _reopen_rule(reopen, point, waist, point.count, rng))))
    return out


def at_event(point: Point, kinds: Sequence[str], waist: Waist, seed: int) -> list[Perturbation]:
    """The perturbations that land at an event the target consumed."""
    reopen = _reopen(kinds, relist=False)
    if not point.match or reopen is None:
        return []
    out = []
    for kind in kinds:
        own = traits(kind)
        if not own.edits_events or own.acts_on != "watch" or own.watch_requests != "any":
            continue
        rng = _rng(seed, point, kind)
        settings = _settings(kind, rng, point.match, waist)
        fields = SPECS[kind].model_fields
        if "events" in fields:
            settings["events"] = {"types": [point.verb], "names": [point.names]}
            if "probability" in fields:
                settings["probability"] = 1.0
        rule = {"name": f"r1-{kind.lower()}-{point.match}",
                "match": {"verbs": ["watch"], "resources": [point.resource]},
                "when": {"maxInjections": 1}, "fault": {kind: settings}}
        # reopened just after the last write of the match before the event (the first, when none came before it)
        out.append(Perturbation(point.id, f"the {point.verb} event of {point.names} on the {point.resource} watch "
                                          "edited", f"{kind}, reopened by {reopen}",
                                (rule, _reopen_rule(reopen, point, waist, max(1, point.before), rng, at=False))))
    return out


def chosen(points: Sequence[Point], per_group: int) -> tuple[list[Point], dict[str, list[str]]]:
    """The points kept per group (spread over it: the first, the last, evenly between), in round-robin order over
    the groups (each group's first, then each group's second, ...); and every group's points."""
    groups: dict[str, list[Point]] = {}
    for p in points:
        groups.setdefault(p.group, []).append(p)
    picked: dict[str, list[Point]] = {}
    for g, members in groups.items():
        n = min(per_group, len(members))
        idx = [0] if n == 1 else sorted({round(i * (len(members) - 1) / (n - 1)) for i in range(n)})
        picked[g] = [members[i] for i in idx]
    order = _turns(list(picked.values()))
    return order, {g: [p.id for p in members] for g, members in groups.items()}


def by_effect(found: Sequence[Perturbation]) -> list[Perturbation]:
    """A point's perturbations, one of each effect first (in the order the effects first come), then the second
    of each, and so on."""
    effects: dict[str, list[Perturbation]] = {}
    for pert in found:
        effects.setdefault(pert.effect, []).append(pert)
    return _turns(list(effects.values()))


def _turns[T](lists: Sequence[Sequence[T]]) -> list[T]:
    """The lists taking turns, one item each, until all are done."""
    return [ps[k] for k in range(max((len(v) for v in lists), default=0)) for ps in lists if k < len(ps)]


def build(points: Sequence[Point], kinds: Sequence[str], waist: Waist, seed: int, per_group: int = 2,
          actions: Sequence[str] = ()) -> Plan:
    """The plan: the chosen points' perturbations, each checked by the strict loader (a refused one is skipped and
    said); kinds this target's trial refuses are left out; `actions`: the trial actions the search may perform.
    Ordered so that the first points of the groups take turns, one of each effect first, before the second ones."""
    if per_group < 1:
        raise ValueError(f"per_group must be at least 1, not {per_group}")
    usable = [k for k in kinds if k not in waist.no_kinds]
    order, groups = chosen(points, per_group)
    plan = Plan(order, groups)
    tiers: dict[int, list[list[Perturbation]]] = {}  # the k-th chosen point of each group -> their perturbations
    seen: dict[str, int] = {}
    for p in order:
        found = (at_write(p, usable, waist, seed, actions) if p.kind == WRITE
                 else at_event(p, usable, waist, seed))
        if not found:
            plan.skipped.append(f"{p.id}: no asked kind lands at a {p.kind} of {p.resource} ({p.verb})")
        kept = []
        for pert in found:
            if valid(Genome(rules=pert.rules, churn=pert.churn)):
                kept.append(pert)
            else:
                plan.skipped.append(f"{p.id}: {pert.what}: the strict loader refuses its rules")
        tier = seen[p.group] = seen.get(p.group, -1) + 1
        tiers.setdefault(tier, []).append(by_effect(kept))
    for tier in sorted(tiers):
        plan.perturbations += _turns(tiers[tier])
    return plan


@dataclass
class PlanCoverage:
    """What a planned search covered: per point the perturbations run and landed, and the distinct end states."""

    plan: Plan
    run: dict[str, int] = field(default_factory=dict)  # point -> perturbations run
    landed: dict[str, int] = field(default_factory=dict)  # point -> perturbations whose first rule fired
    broke: dict[str, set[str]] = field(default_factory=dict)  # point -> invariants its trials broke
    end_states: set[str] = field(default_factory=set)

    def add(self, pert: Perturbation, fired: Iterable[str], end_state: Mapping[str, Any] | None,
            masked: frozenset[str] = frozenset(), broken: Iterable[str] = ()) -> None:
        """Count one planned trial: its point, whether its landing rule fired, what it broke, its end state (masked
        facts out)."""
        self.run[pert.point] = self.run.get(pert.point, 0) + 1
        self.broke.setdefault(pert.point, set()).update(broken)
        if pert.rules[0]["name"] in set(fired):
            self.landed[pert.point] = self.landed.get(pert.point, 0) + 1
        if end_state:
            kept = {k: v for k, v in end_state.items() if k not in masked}
            self.end_states.add(json.dumps(kept, sort_keys=True))

    def as_dict(self) -> dict[str, Any]:
        """The report's figures."""
        planned = [p.id for p in self.plan.points if any(x.point == p.id for x in self.plan.perturbations)]
        covered = [p for p in planned if self.landed.get(p)]
        groups_covered = {p.group for p in self.plan.points if p.id in covered}
        return {"points": len(planned), "pointsCovered": len(covered),
                "pointsRun": sum(1 for p in planned if self.run.get(p)),
                "pointsSeen": sum(len(v) for v in self.plan.groups.values()), "groups": len(self.plan.groups),
                "groupsCovered": len(groups_covered), "perturbations": len(self.plan.perturbations),
                "perturbationsRun": sum(self.run.values()), "perturbationsLanded": sum(self.landed.values()),
                "distinctEndStates": len(self.end_states), "skipped": list(self.plan.skipped),
                "uncovered": [p for p in planned if not self.landed.get(p)],
                "byPoint": [{"point": p.id, "group": p.group, "object": p.object, "count": p.count,
                             "perturbations": sum(1 for x in self.plan.perturbations if x.point == p.id),
                             "run": self.run.get(p.id, 0), "landed": self.landed.get(p.id, 0),
                             "broke": sorted(self.broke.get(p.id, ()))} for p in self.plan.points]}


def lines(cov: Mapping[str, Any]) -> list[str]:
    """The plan's coverage as report.md shows it."""
    out = [f"- points covered: {cov['pointsCovered']} of {cov['points']} in the plan (a point is covered when a "
           f"perturbation's landing rule fired there; {cov['pointsRun']} run); {cov['pointsSeen']} causal points in "
           f"the reference run, in {cov['groups']} groups (same resource, verb, phase), {cov['groupsCovered']} "
           "covered",
           f"- perturbations: {cov['perturbationsRun']} of {cov['perturbations']} run, {cov['perturbationsLanded']} "
           "landed",
           f"- distinct end states reached: {cov['distinctEndStates']} (the differential oracle's facts; masked "
           "facts left out when --differential is on)"]
    if cov["byPoint"]:
        out += ["", "| point | group | object (reference run) | perturbations | run | landed | broke |",
                "|---|---|---|---|---|---|---|"]
        out += [f"| {r['point']} | {r['group']} | {r['object']} | {r['perturbations']} | {r['run']} | {r['landed']} | "
                f"{', '.join(r['broke']) or '-'} |" for r in cov["byPoint"]]
        out.append("")
    if cov["uncovered"]:
        out.append("- points not covered: " + ", ".join(cov["uncovered"][:20])
                   + (f" and {len(cov['uncovered']) - 20} more" if len(cov["uncovered"]) > 20 else ""))
    if cov["skipped"]:
        out.append("- left out of the plan: " + "; ".join(cov["skipped"][:10])
                   + (f" and {len(cov['skipped']) - 10} more" if len(cov["skipped"]) > 10 else ""))
    return out
