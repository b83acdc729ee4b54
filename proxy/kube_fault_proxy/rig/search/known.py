"""Known findings as data: the catalogue of bugs the search has already found (shipped as known-findings.yaml,
each with its signature and upstream reference), and matching a hit against it (a break that is the
fault's own effect is told apart by the ledger: search/excused.py).

A hit matches an entry when the scheduler is the entry's, its build matches one of `builds` and none of
`fixedIn` (shell patterns over the build as `cluster status` names it), it breaks every invariant of `breaks`
and none outside `within`, its profile holds a `kind on match` that one of `provokedBy`'s patterns names, and its
trial actions (`search --actions`: node and pod churn) hold one that one of `actions`'s patterns names. An entry
gives `provokedBy`, `actions` or both; what it leaves out is not asked (a bug an action alone provokes, under
any fault or none, gives only `actions`)."""

from __future__ import annotations

from fnmatch import fnmatchcase
from functools import cache
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import AfterValidator, Field, field_validator, model_validator

from kube_fault_proxy.proxy.profiles.loader import load_model
from kube_fault_proxy.proxy.profiles.problems import Problem, ProfileError
from kube_fault_proxy.proxy.schema.strict import StrictModel
from kube_fault_proxy.rig.actions.trial_churn import ACTIONS
from kube_fault_proxy.rig.invariants.catalogue import lookup
from kube_fault_proxy.rig.search.findings import kinds_on_matches, trial_actions
from kube_fault_proxy.rig.search.genome import Genome

SHIPPED = Path(__file__).with_name("known-findings.yaml")


def _invariants(words: list[str]) -> list[str]:
    """Names or aliases as the search keys them (I2, stranded); an unknown one is refused."""
    return [lookup(w).key for w in words]


def _action_pattern(pattern: str) -> str:
    """A trial action's name, or a shell pattern naming at least one (`*Node`); anything else is refused, so a
    misspelt action is an error, not an entry that never matches."""
    if not any(fnmatchcase(a, pattern) for a in ACTIONS):
        raise ValueError(f"unknown trial action {pattern!r} (one of {', '.join(ACTIONS)}, or a shell pattern "
                         "naming some)")
    return pattern


ActionPattern = Annotated[str, AfterValidator(_action_pattern)]


class Signature(StrictModel):
    """What a hit of a known bug looks like."""

    breaks: list[str] = Field(min_length=1, description="invariants every hit breaks (names or aliases)")
    within: list[str] | None = Field(None, description="invariants a hit may break at most (default: any)")
    provoked_by: list[str] | None = Field(None, min_length=1, alias="provokedBy",
                                          description="`kind on match` patterns (e.g. `resetUpstream on binding`, "
                                                      "`* on binding`); the profile holds one of them (left out: "
                                                      "any faults)")
    actions: list[ActionPattern] | None = Field(
        None, min_length=1, description="trial actions (`search --actions`: `flapNode`, `deleteNode`, `deletePod`, "
                                        "...; shell patterns such as `*Node`); the trial's actions hold one of them "
                                        "(left out: any actions, or none)")

    @field_validator("breaks", "within")
    @classmethod
    def _known_invariants(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else _invariants(v)

    @model_validator(mode="after")
    def _provoked(self) -> Self:
        if self.provoked_by is None and self.actions is None:
            raise ValueError("a signature needs `provokedBy` (fault kinds on matches), `actions` (trial actions) "
                             "or both")
        return self

    def provokes(self, genome: Genome) -> bool:
        """Whether a profile and its trial actions have what this signature names (each part it gives)."""
        return (self.provoked_by is None or any(fnmatchcase(km, p) for km in kinds_on_matches(genome)
                                                for p in self.provoked_by)) and \
            (self.actions is None or any(fnmatchcase(a, p) for a in trial_actions(genome) for p in self.actions))

    def provocation(self) -> str:
        """What provokes it, in words (the reports)."""
        actions = f"a trial action of {', '.join(f'`{a}`' for a in self.actions)}" if self.actions else ""
        if not self.provoked_by:
            return f"{actions}, under any faults or none"
        faults = ", ".join(f"`{p}`" for p in self.provoked_by)
        return f"{faults} with {actions}" if actions else faults


class KnownFinding(StrictModel):
    """One known bug: its signature, where it applies and where it is reported."""

    id: str = Field(min_length=1, description="a short name: the upstream issue (YUNIKORN-3355) or a slug")
    title: str = Field(min_length=1, description="one line: what goes wrong")
    scheduler: Literal["yunikorn", "kube-scheduler", "kube-controller-manager"] = Field(
        description="the target it is a bug of (a scheduler, or kube-controller-manager)")
    builds: list[str] = Field(min_length=1, description="build patterns it applies to (`yunikorn v1.9.0*`)")
    fixed_in: list[str] = Field(default_factory=list, alias="fixedIn",
                                description="build patterns where it is fixed (checked before `builds`)")
    signature: Signature
    upstream: str = Field(min_length=1, description="the upstream reference (an issue URL, or `unreported`)")
    report: str | None = Field(None, description="this project's write-up, if any")

    def applies_to(self, scheduler: str, build: str | None) -> bool:
        """Whether the build under test is in its range."""
        name = build or scheduler
        return scheduler == self.scheduler and not any(fnmatchcase(name, p) for p in self.fixed_in) and any(
            fnmatchcase(name, p) for p in self.builds)

    def matches(self, broken: list[str], genome: Genome) -> bool:
        """Whether a run that broke these invariants under this profile has its signature."""
        sig, got = self.signature, set(broken)
        if not set(sig.breaks) <= got or (sig.within is not None and not got <= set(sig.within)):
            return False
        return sig.provokes(genome)


class Catalogue(StrictModel):
    """The file: `known: [...]`."""

    known: list[KnownFinding]

    def match(self, broken: list[str], genome: Genome, scheduler: str, build: str | None) -> KnownFinding | None:
        """The first entry a hit matches, if any."""
        return next((k for k in self.known if k.applies_to(scheduler, build) and k.matches(broken, genome)), None)

    def match_confirmed(self, target: list[str], first: list[str], replay: list[str] | None, genome: Genome,
                        scheduler: str, build: str | None) -> KnownFinding | None:
        """A confirmed hit's entry: the one what both runs broke matches; or else the one either run matches (the
        first run's tried first) when the other run stayed within that entry's signature (a bug whose face is a
        race: YUNIKORN-3355's pods are booked as phantoms or left ignored as YuniKorn's relist falls before or after
        the failed binds, in the first run or in the replay)."""
        entry = self.match(target, genome, scheduler, build)
        if entry is not None or replay is None:
            return entry
        for one, other in ((first, replay), (replay, first)):
            entry = self.match(one, genome, scheduler, build)
            within = entry.signature.within if entry is not None else None
            if entry is not None and (within is None or set(other) <= set(within)):
                return entry
        return None

    def merged(self, other: Catalogue) -> Catalogue:
        """This catalogue and another's entries (an id both have: the other's wins)."""
        ids = {k.id for k in other.known}
        return Catalogue(known=[*(k for k in self.known if k.id not in ids), *other.known])


def load(path: Path) -> Catalogue:
    """A catalogue file; ProfileError names file:line:col and the field of every problem."""
    source = str(path)
    catalogue = load_model(path, Catalogue, "a known-findings catalogue is a mapping with `known:`")
    ids = [k.id for k in catalogue.known]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ProfileError([Problem(source, None, None, "known", f"the id {dup!r} is given twice")])
    return catalogue


@cache
def shipped() -> Catalogue:
    """The catalogue the package ships."""
    return load(SHIPPED)


def catalogue(extra: tuple[Path, ...] = ()) -> Catalogue:
    """The shipped catalogue with the user's own files added (later files win on a shared id)."""
    out = shipped()
    for path in extra:
        out = out.merged(load(path))
    return out
