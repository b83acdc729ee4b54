"""A trial that broke invariants, and what confirming it showed: what the engine records, the outcome counts and
the findings group."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kube_fault_proxy.rig.search.genome import Genome


@dataclass
class Hit:
    """A trial that broke invariants, and what confirming it showed."""

    trial: int
    genome: Genome
    broken: list[str]
    replay: list[str] | None = None
    control: list[str] | None = None
    # confirmed | not-reproduced | control-broken (the control broke the same: the faults' or the workload's doing)
    # | no-injection (nothing injected: not the faults) | known (a known bug's signature, confirmed once)
    # | excused (the ledger excuses every break: the fault's own effect, invariants/excuses.py)
    verdict: str = "unconfirmed"
    known: str | None = None  # the known finding's id, or why the ledger excuses it
    ledger: str | None = None  # what the ledger excused of the first run's breaks and what it did not
    # What the first run and the replay broke that a control of the same scheduler broke too (another build, other
    # gates, no fault): the faults' effect, left out of what the hit is confirmed on (outcome.kept_by_control).
    shared: list[str] = field(default_factory=list)

    @property
    def target(self) -> list[str]:
        """What both the first run and the replay broke, but for what the control broke too (`shared`)."""
        return sorted(set(self.broken) & set(self.replay or []) - set(self.shared))

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"trial": self.trial, "genome": self.genome.canonical(), "broken": self.broken, "replay": self.replay,
                "control": self.control, "verdict": self.verdict, "known": self.known, "ledger": self.ledger,
                "shared": self.shared}
