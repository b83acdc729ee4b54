"""The nondeterminism form of the differential oracle (as in Kamera): one case replayed under N event orders.

The workload stays (pods, nodes, shape, action, seed) and so do the faults; only the draws of the rules that order
watch events (the kinds whose traits say `orders_events`: a delay or a hold of watch events) change from one order
to the next. A rule's draws come from a stream seeded by (the profile's seed, the rule's name), so order k renames
each such rule `<name>-o<k>`: its streams are new (which watches it holds or delays, and each event's jitter), every
other rule draws what it drew before. A rule that draws nothing (probability 1, no jitter) orders events the same
way every time, so a case with no rule that draws is refused: `search replay` reruns it as it is.

K clean runs of the same workload (no rule, the same seed) learn what varies by itself (differential.Baseline:
the mask). The orders' end states, masked, are compared with one another: more than one distinct state means the
target converged to a state that depends on the order it saw events in. That is the finding (`nondeterministic`),
whether or not an invariant names it; the facts that differ between the states are its evidence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kube_fault_proxy.rig.search import differential
from kube_fault_proxy.rig.search.genome import Genome, Rule
from kube_fault_proxy.rig.search.kinds import ORDER_KINDS, traits
from kube_fault_proxy.rig.search.trial import Rig, Tier, TrialResult, run_trial

NONDETERMINISTIC = "nondeterministic"  # more than one distinct end state among the orders
ONE_END_STATE = "one end state"  # every order reordered events, and all ended in one state
NAME_MAX = 63  # a rule's name (profile.NAME_PATTERN)


def _fault(rule: Rule) -> tuple[str, Mapping[str, Any]]:
    (kind, spec), = rule["fault"].items()
    return kind, spec or {}


def draws_an_order(rule: Rule) -> bool:
    """Whether a rule orders watch events by a draw: a rule of a kind that reorders events (its traits say so)
    that applies to a watch with a probability below 1, or that draws a setting per event (its
    traits' `order_draw`, such as a jitter)."""
    kind, spec = _fault(rule)
    own = traits(kind)
    if not own.orders_events:
        return False
    return float(rule.get("probability", 1.0)) < 1.0 or (own.order_draw is not None
                                                        and float(spec.get(own.order_draw, 0.0)) > 0.0)


def reordering(genome: Genome) -> set[str]:
    """The names of the case's rules that draw an order."""
    return {r["name"] for r in genome.rules if draws_an_order(r)}


def renamed(name: str, order: int) -> str:
    """`<name>-o<order>`, the name shortened to keep it a rule's name (at most 63 characters, ending in an
    alphanumeric)."""
    suffix = f"-o{order}"
    return name[:NAME_MAX - len(suffix)].rstrip("-.") + suffix


def reordered(genome: Genome, order: int) -> Genome:
    """The case with every rule that draws an order renamed for `order`: new draws for those, the same for the
    rest. ValueError when no rule draws one."""
    if not any(draws_an_order(r) for r in genome.rules):
        kinds = ", ".join(sorted(ORDER_KINDS))
        raise ValueError(f"nothing to reorder: no rule of this case that reorders events ({kinds}) draws from its "
                         "stream (a probability below 1, or a setting drawn per event such as "
                         "jitterSeconds); `search replay` reruns it as it is")
    rules = tuple({**r, "name": renamed(r["name"], order)} if draws_an_order(r) else r for r in genome.rules)
    return genome.with_(rules=rules, origin=f"order-{order}")


def differing(states: Sequence[differential.Facts], baseline: differential.Baseline) -> dict[str, list[Any]]:
    """The unmasked facts whose value is not the same in every state, with each state's value (in order)."""
    keys = sorted({k for s in states for k in s} - baseline.masked)
    out: dict[str, list[Any]] = {}
    for k in keys:
        values = [s.get(k, differential.ABSENT) for s in states]
        if len(set(values)) > 1:
            out[k] = values
    return out


@dataclass
class Orders:
    """What the clean runs and the orders gave."""

    clean: list[TrialResult] = field(default_factory=list)
    runs: list[TrialResult] = field(default_factory=list)
    baseline: differential.Baseline | None = None
    distinct: list[differential.Facts] = field(default_factory=list)
    differing: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def unclean(self) -> list[str]:
        """The clean runs that broke an invariant or failed: no mask is learned from them."""
        return [f"{r.name}: {r.error or ', '.join(r.broken)}" for r in self.clean if r.error or r.broken]

    @property
    def failed(self) -> list[str]:
        """The orders that ended in an error (no end state to compare)."""
        return [f"{r.name}: {r.error}" for r in self.runs if r.error or not r.end_state]

    @property
    def acted(self) -> list[TrialResult]:
        """The orders in which a rule that reorders events acted: a watch rule acts only on a watch opened after the
        profile was switched on, so without a rule that reopens the target's watches it may never act."""
        return [r for r in self.runs if reordering(r.genome) & r.fired]

    @property
    def verdict(self) -> str:
        """`nondeterministic`, `one end state`, or why there is no verdict."""
        if self.baseline is None:
            return "no verdict: the clean runs were not clean (" + "; ".join(self.unclean) + ")"
        if len(self.distinct) > 1:
            return NONDETERMINISTIC
        if self.failed:
            return "no verdict: an order failed (" + "; ".join(self.failed) + ")"
        if len(self.acted) < len(self.runs):
            return (f"no verdict: the rules that reorder events acted in {len(self.acted)} of {len(self.runs)} "
                    "orders (a watch rule acts on a watch opened after the profile is on: give the case a rule "
                    "that reopens the target's watches)")
        return ONE_END_STATE

    def state_of(self, run: TrialResult) -> int | None:
        """Which distinct state (1-based) a run ended in; None for a run with no end state."""
        if self.baseline is None or not run.end_state:
            return None
        key = self.baseline.masked_state(run.end_state)
        return next(i + 1 for i, s in enumerate(self.distinct) if self.baseline.masked_state(s) == key)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (what `search orders` writes)."""
        acted = {r.name for r in self.acted}
        return {"verdict": self.verdict, "cleanRuns": [_run(r) for r in self.clean],
                "masked": sorted(self.baseline.masked) if self.baseline else None,
                "orders": [{**_run(r), "endStateIndex": self.state_of(r), "reordered": r.name in acted}
                           for r in self.runs],
                "distinctEndStates": len(self.distinct), "differing": self.differing}


def _run(r: TrialResult) -> dict[str, Any]:
    return {"name": r.name, "broken": r.broken, "error": r.error, "injections": r.injections,
            "fired": sorted(r.fired), "seconds": round(r.seconds, 1), "endState": r.end_state}


def run_orders(rig: Rig, genome: Genome, orders: int, clean: int, tier: Tier,
               note: Callable[[str], None]) -> Orders:
    """K clean runs of the case's workload (the mask), then the case under `orders` event orders, on one rig."""
    cases = [reordered(genome, k + 1) for k in range(orders)]  # refused before any run when nothing draws
    out = Orders()
    for k in range(clean):
        out.clean.append(run_trial(rig, genome.with_(rules=(), origin="clean"), f"clean-{k + 1}", tier, note))
    if not out.unclean:
        out.baseline = differential.Baseline.learn([r.end_state for r in out.clean])
    for k, case in enumerate(cases):
        out.runs.append(run_trial(rig, case, f"order-{k + 1}", tier, note))
    if out.baseline is not None:
        out.distinct = differential.distinct_end_states([r.end_state for r in out.runs if r.end_state],
                                                        out.baseline)
        out.differing = differing(out.distinct, out.baseline)
    return out
