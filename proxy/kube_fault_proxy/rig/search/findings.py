"""Confirmed findings grouped by signature: the invariants broken, plus the profile's fault kinds and matches.

Hits are grouped as they are confirmed (by their drawn profile); each group is shrunk (the first of each set
of broken invariants first) unless an earlier minimal case is contained in its drawn profile or the total
shrink budget is spent, and groups whose minimal profiles share a signature are merged: one finding per
distinct bug, each with its own report."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kube_fault_proxy.rig.search.genome import Genome, Rule, fault_kind
from kube_fault_proxy.rig.search.hit import Hit
from kube_fault_proxy.rig.search.waist import CONTROLLERS, SCHEDULER

if TYPE_CHECKING:
    from kube_fault_proxy.rig.search.shrink import Shrunk
    from kube_fault_proxy.rig.search.trial import TrialResult

Signature = tuple[str, ...]


def match_name(rule: Rule) -> str:
    """The grammar's name for a rule's match (`binding`, `pod-watch`, `pod-create`, ...), else the match as JSON."""
    match = rule.get("match") or {}
    for name, selector, _, _ in SCHEDULER.matches + CONTROLLERS.matches:
        if {k: list(v) for k, v in selector.items()} == match:
            return name
    return json.dumps(match, sort_keys=True, separators=(",", ":"))


def kinds_on_matches(genome: Genome) -> set[str]:
    """Each distinct `kind on match` of a profile."""
    return {f"{fault_kind(r)} on {match_name(r)}" for r in genome.rules}


def trial_actions(genome: Genome) -> set[str]:
    """Each distinct trial action (node and pod churn: its `do`) of a genome."""
    return {str(a["do"]) for a in genome.churn}


def with_actions(kinds: str, genome: Genome) -> str:
    """A `kind on match` text with the genome's trial actions after it (`; actions: flapNode`), as the reports
    show what a known finding's `provokedBy` and `actions` are read from."""
    names = sorted(trial_actions(genome))
    return f"{kinds}; actions: {', '.join(names)}" if names else kinds


def signature(target: list[str], genome: Genome) -> Signature:
    """The invariants broken, then each distinct `kind on match` of the profile, sorted."""
    return (",".join(sorted(target)), *sorted(kinds_on_matches(genome)))


@dataclass
class Finding:
    """One distinct confirmed bug: its hits, and what shrinking and replaying its minimal case showed."""

    signature: Signature
    target: list[str]
    hits: list[Hit] = field(default_factory=list)
    shrunk: Shrunk | None = None
    replays: list[list[str]] = field(default_factory=list)
    minimal_control: list[str] | None = None
    witness: TrialResult | None = None
    shrink_seconds: float = 0.0
    contained: int = 0  # hits of other drawn profiles filed here unshrunk (`contained_in`)
    known: str | None = None  # the known finding it matches (searched as new ground: --include-known)

    @property
    def first(self) -> Hit:
        """The hit that found it."""
        return self.hits[0]

    @property
    def minimal(self) -> Genome:
        """The shrunk genome (the first hit's before shrinking)."""
        return self.shrunk.genome if self.shrunk is not None else self.first.genome

    @property
    def reproduced(self) -> int:
        """Replays of the minimal case that broke the target invariants."""
        return sum(1 for broken in self.replays if set(self.target) <= set(broken))

    def rate(self) -> str:
        """Reproduction rate, `3/5` (or `-` before any replay)."""
        return f"{self.reproduced}/{len(self.replays)}" if self.replays else "-"

    def slug(self, index: int) -> str:
        """Its report directory's name: `1-stranded-abort-on-binding`."""
        kinds = "-".join(part.replace(" on ", "-on-") for part in self.signature[1:3])
        text = f"{index}-{'-'.join(self.target)}-{kinds}".lower()
        return "".join(c if c.isalnum() or c == "-" else "-" for c in text)[:72].rstrip("-")

    def as_dict(self, index: int) -> dict[str, Any]:
        """JSON form for the index."""
        return {"signature": list(self.signature), "target": self.target, "trials": [h.trial for h in self.hits],
                "shrunk": self.shrunk is not None, "contained": self.contained,
                "reproduced": self.reproduced, "replays": len(self.replays), "minimalControl": self.minimal_control,
                "known": self.known,
                "dir": f"findings/{self.slug(index)}"}


def add_hit(findings: list[Finding], hit: Hit) -> Finding:
    """File a confirmed hit under the finding of its signature (a new one if none has it)."""
    sig = signature(hit.target, hit.genome)
    for f in findings:
        if f.signature == sig:
            f.hits.append(hit)
            return f
    found = Finding(sig, hit.target, [hit])
    findings.append(found)
    return found


def shrink_order(findings: list[Finding]) -> list[Finding]:
    """The order to shrink in: the first finding of each distinct set of broken invariants, then the rest,
    each group as found. Drawn profiles seldom share a signature, so a long search confirms many groups of
    one bug; a bounded shrink phase reaches every kind of violation first."""
    firsts: dict[str, Finding] = {}
    for f in findings:
        firsts.setdefault(f.signature[0], f)  # the signature's head: the invariants broken
    lead = list(firsts.values())
    return lead + [f for f in findings if all(f is not x for x in lead)]


def contained_in(found: Finding, shrunk: list[Finding]) -> Finding | None:
    """An already shrunk finding that breaks the same invariants and whose minimal profile's every `kind on
    match` is in this finding's drawn profile: the drawn profile holds that cause, so this group is filed
    under it without a shrink of its own (and the report counts it)."""
    drawn = kinds_on_matches(found.first.genome)
    for f in shrunk:
        if f.shrunk is not None and set(f.target) == set(found.target) and kinds_on_matches(f.minimal) <= drawn:
            return f
    return None


def merge(findings: list[Finding]) -> list[Finding]:
    """After shrinking: findings whose minimal cases share a signature are one (the first keeps its case)."""
    out: list[Finding] = []
    for f in findings:
        sig = signature(f.target, f.minimal)
        same = next((o for o in out if o.signature == sig), None)
        if same is None:
            f.signature = sig
            out.append(f)
        else:
            same.hits += f.hits
            same.contained += f.contained
    return out
