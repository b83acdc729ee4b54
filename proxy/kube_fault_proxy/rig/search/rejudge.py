"""Re-judging a stored search (`search rejudge`): each hit its `search.json` kept, judged again by today's rules.

A stored search keeps, per hit, what broke, the profile (genome), the replay's and the control's breaks and the
verdict of its day; no search keeps its trials' journals or histories (a planned search's reference run aside).
So the ledger (invariants/ledger.py) is re-applied from what the record holds:

- a hit the search already judged with the journal keeps that judgement (`excused`, or its older name
  `fault-effect`; a hit with a `ledger` text was judged and not excused);
- else the excuse rules (invariants/excuses.py) are asked what effect each broken invariant's excuse counts
  (a pod create that committed unanswered; a pod's dropped ADDED event; for `stranded`, also a node's), and the
  profile's rules what effects they can make at all (read from the kinds' traits and editors, and the ledger's own
  table: no kind is named). A hit one of whose breaks no rule of its profile can excuse is **not excusable**: that
  is exact without the journal. A hit whose every break its profile might excuse is **undecided**: only its
  journal (and, for the controllers, its history) can say, and the record kept neither: it needs a replay.

A control of the same scheduler (another build, other gates, or no fault) that broke only a part of a hit's
invariants left the rest confirmed since 2026-12-07 (the part it broke is the faults' effect); a stored
`control-broken` hit of such a search is re-judged on the rest. Then the rest of today's classification: a
confirmed hit of a known bug (known-findings.yaml) is `known`, and a
confirmed hit counts as confirmed only on as many clean control runs as a search asks now (a record kept one
control run per hit: `under-controlled`). Replays and controls are never re-run here (that needs a cluster).

Pure but for `read`: a search.json in, Rejudged hits and a table out."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kube_fault_proxy.proxy.faults import KINDS, FaultSpec
from kube_fault_proxy.proxy.requests.watch import EventEditor
from kube_fault_proxy.rig.invariants import excuses, ledger
from kube_fault_proxy.rig.search import known as known_findings
from kube_fault_proxy.rig.search.excused import REANNOUNCING
from kube_fault_proxy.rig.search.findings import kinds_on_matches
from kube_fault_proxy.rig.search.genome import Genome, Rule, fault_kind
from kube_fault_proxy.rig.search.outcome import kept_by_control, same_judge

# What each classification of a hit is called in the table, in the order of the precision figure.
CLASSES = ("excused", "undecided", "control-broken", "not-reproduced", "no-injection", "known", "under-controlled",
           "confirmed")
JUDGED_EXCUSED = ("excused", "fault-effect")  # `fault-effect`: what `excused` was called before the ledger


def _journals(spec: type[FaultSpec], effect: ledger.EffectKind) -> bool:
    """Whether a kind's watch-event editor (in its own module) journals an action the ledger reads as `effect`."""
    editors = [v for v in vars(sys.modules[spec.__module__]).values()
               if isinstance(v, type) and issubclass(v, EventEditor) and v.__module__ == spec.__module__]
    return any(ledger.WATCH_ACTIONS.get(str(getattr(e, "action", ""))) == effect for e in editors)


# Kinds whose write may commit while its client sees an error: the ledger's unanswered kinds, and the kinds that
# send a write again later as the client's own (it commits after its error).
LOST_CREATE_KINDS = frozenset(ledger.UNANSWERED | {k.kind for k in KINDS if k.traits.acts_on == "resent-write"})
EVENT_DROPPING_KINDS = frozenset(k.kind for k in KINDS if k.traits.edits_events and _journals(k, "event-dropped"))
# What each excuse rule counts in the ledger: (fault kinds that make it, resource, verb, watch event type).
NEEDS: dict[excuses.Rule, tuple[frozenset[str], str, str, str]] = {
    excuses.surplus_rule: (LOST_CREATE_KINDS, "pods", "create", ""),
    excuses.success_rule: (LOST_CREATE_KINDS, "pods", "create", ""),
    excuses.stranding_rule: (EVENT_DROPPING_KINDS, "pods", "watch", "ADDED"),
    excuses.overcommit_rule: (LOST_CREATE_KINDS, "pods", "create/binding", ""),
}
# A second effect that excuses one invariant (excuses.stranding_rule): a `stranded` pod whose every node with room
# lost its ADDED on a node watch (touchPods re-announces pods, not nodes).
OR_NEEDS: dict[str, tuple[frozenset[str], str, str, str]] = {
    "stranded": (EVENT_DROPPING_KINDS, "nodes", "watch", "ADDED"),
}
# Connection faults (they act on every request): every stream on a cut connection fails at once, so a pod create in
# flight on one may have committed, and the journal names only the request the rule matched: the ledger holds no
# lost create for it.
CUTTING = frozenset(k.kind for k in KINDS if k.traits.acts_on == "any")


class RejudgeError(ValueError):
    """A stored search the re-judging cannot read: names the file and the field."""


@dataclass(frozen=True)
class Rejudged:
    """One stored hit: its verdict then (`before`) and now (`after`, one of CLASSES), and why."""

    trial: int
    broken: tuple[str, ...]
    before: str
    after: str
    why: str
    blind: bool = False  # not excusable, yet its profile cut connections a lost create may have been on (CUTTING)
    kinds: frozenset[str] = frozenset()  # each `kind on match` of its profile (findings.kinds_on_matches)
    known: str | None = None  # the known finding it is a hit of (when `after` is `known`)

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"trial": self.trial, "broken": list(self.broken), "before": self.before, "after": self.after,
                "why": self.why, "ledgerBlind": self.blind, "known": self.known}


@dataclass
class Stored:
    """One stored search re-judged: where it is, what it was run on, and its hits (none for a record that kept only
    a minimal case: `note` says so)."""

    path: Path
    scheduler: str
    build: str | None
    control: str | None
    hits: list[Rejudged] = field(default_factory=list)
    note: str | None = None
    argv: list[str] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)

    def before(self) -> Counter[str]:
        """The hits by the verdict the record gave them (`fault-effect` counted as `excused`)."""
        return Counter("excused" if h.before in JUDGED_EXCUSED else h.before for h in self.hits)

    def after(self) -> Counter[str]:
        """The hits by today's classification."""
        return Counter(h.after for h in self.hits)

    def blind(self) -> int:
        """Hits the ledger cannot excuse whose profile cut connections a lost pod create may have been on."""
        return sum(1 for h in self.hits if h.blind)


@dataclass(frozen=True)
class Group:
    """One finding the record reported (a group of confirmed hits): its signature, hits, and its minimal case's
    replays."""

    signature: tuple[str, ...]
    trials: tuple[int, ...]
    reproduced: int | None
    replays: int | None

    def verdict(self, hits: Sequence[Rejudged]) -> str:
        """Whether it survives the re-judging: a hit of it still confirmed; else why not, or what is pending."""
        after = [h for h in hits if h.trial in self.trials]
        classes = {h.after for h in after}
        if "confirmed" in classes:
            return "survives"
        if "under-controlled" in classes:
            blind = "; the ledger blind: its profile cuts connections" if any(h.blind for h in after) else ""
            same = self.alike(hits)
            many = "" if len(same) == 1 else "s"
            alike = f"; {len(same)} other hit{many} with its invariants and kinds broke under the control too " \
                    f"(trial{many} {', '.join(str(h.trial) for h in same)})" if same else ""
            return f"pending: more control runs{blind}{alike}"
        if "undecided" in classes:
            return "pending: a replay with the journal"
        if classes == {"known"}:
            return f"does not survive: known ({', '.join(sorted({str(h.known) for h in after}))})"
        return "does not survive: " + ", ".join(sorted(classes)) if classes else "no hit of it kept"

    def alike(self, hits: Sequence[Rejudged]) -> list[Rejudged]:
        """Other hits that broke its invariants under a profile with its kinds on its matches, and whose control
        broke the same: evidence that the group is the faults' effect."""
        invariants, kinds = set(self.signature[0].split(",")), set(self.signature[1:])
        return [h for h in hits if h.trial not in self.trials and h.after == "control-broken"
                and invariants <= set(h.broken) and kinds <= h.kinds]


def _reaches(rule: Rule, resource: str, verb: str) -> bool:
    """Whether a rule's match can select a request of this resource and verb (`create/binding`: of that
    subresource; a plain verb: with no subresource). An unset field selects anything; a field this reader does not
    know is taken to select anything."""
    match = rule.get("match") or {}
    resources, verbs, subresources = match.get("resources"), match.get("verbs"), match.get("subresources")
    verb, _, sub = verb.partition("/")
    return ((not resources or resource in resources or "*" in resources) and (not verbs or verb in verbs)
            and (not subresources or sub in subresources if sub else not subresources))


def _drops(rule: Rule, event: str) -> bool:
    """Whether an event-dropping rule may drop watch events of this type (its `events.types`, unset: every type)."""
    settings = next(iter((rule.get("fault") or {}).values()), None) or {}
    types = (settings.get("events") or {}).get("types") if isinstance(settings, Mapping) else None
    return not types or event in types


def can_make(rule: Rule, kinds: frozenset[str], resource: str, verb: str, event: str) -> bool:
    """Whether one rule of a profile can put the effect an excuse counts into the ledger."""
    kind = fault_kind(rule)
    return kind in kinds and _reaches(rule, resource, verb) and (not event or _drops(rule, event))


def excusable(broken: Sequence[str], genome: Genome) -> tuple[bool, str]:
    """(whether the ledger might excuse every break of this profile's run, why). False is exact: some break has no
    excuse rule, or no rule of the profile can make the effect its rule counts."""
    for invariant in broken:
        rule = excuses.RULES.get(invariant)
        if rule is None:
            return False, f"{invariant}: no ledger effect excuses it"
        other = OR_NEEDS.get(invariant)
        if other is not None and any(can_make(r, *other) for r in genome.rules):
            continue  # the journal decides, whatever the workload did to its pods
        if rule is excuses.stranding_rule and genome.action == REANNOUNCING:
            return False, f"{invariant}: the workload touched every pod after the faults (touchPods), which " \
                          "re-announces a pod whose ADDED was dropped"
        need = NEEDS.get(rule)
        if need is None:  # a rule this reader has no entry for: the journal decides
            continue
        kinds, resource, verb, event = need
        if not any(can_make(r, kinds, resource, verb, event) for r in genome.rules):
            what = f"a dropped {event} event of {resource}" if event else f"a {resource} {verb} that committed " \
                                                                          "unanswered"
            return False, f"{invariant}: its excuse counts {what} ({', '.join(sorted(kinds))}), and no rule of " \
                          "the profile makes one"
    return True, "every break has an excuse its profile can make: only the journal can say (not kept)"


def blind(broken: Sequence[str], genome: Genome) -> bool:
    """Whether the ledger may be blind to this run's excuse: a break counted by lost pod creates, under a profile
    that cuts connections (CUTTING) with none of the kinds the ledger counts as a lost create."""
    needs = [NEEDS.get(rule) for b in broken if (rule := excuses.RULES.get(b)) is not None]
    counted = any(n is not None and n[0] == LOST_CREATE_KINDS for n in needs)
    return counted and any(fault_kind(r) in CUTTING for r in genome.rules)


def genome_of(doc: Any, where: str) -> Genome:
    """A hit's genome (the canonical JSON string a search.json holds, or its object)."""
    try:
        return Genome.from_doc(doc, f"{where}: field 'genome'")
    except ValueError as e:
        raise RejudgeError(str(e)) from None


@dataclass(frozen=True)
class Rules:
    """What today's classification asks: the known-findings catalogue and the clean control runs per hit."""

    catalogue: known_findings.Catalogue
    controls: int = 3


def rejudge_hit(hit: Mapping[str, Any], stored: Stored, rules: Rules, where: str) -> Rejudged:
    """One stored hit judged again (the order is the search's: nothing injected, the ledger, the replay, the
    control, the known bugs, the number of controls)."""
    for name in ("trial", "broken", "verdict", "genome"):
        if name not in hit:
            raise RejudgeError(f"{where}: a hit has no field {name!r}")
    broken, before = tuple(str(b) for b in hit["broken"]), str(hit["verdict"])
    genome = genome_of(hit["genome"], where)

    def out(after: str, why: str, known: str | None = None) -> Rejudged:
        cut = not judged and after not in ("excused", "undecided", "no-injection") and blind(broken, genome)
        if cut:
            why += (f"; the profile cuts connections ({', '.join(sorted(CUTTING))}): a pod create in flight on one may "
                    "have committed unanswered, which the journal does not record, so the ledger is blind to it")
        return Rejudged(int(hit["trial"]), broken, before, after, why, cut, frozenset(kinds_on_matches(genome)),
                        known)

    judged = hit.get("ledger")

    if before == "no-injection":
        return out("no-injection", "nothing was injected")
    if before in JUDGED_EXCUSED:
        return out("excused", f"judged from the journal when the search ran: {hit.get('known') or '(no text)'}")
    if not judged:
        possible, why = excusable(broken, genome)
        if possible:
            return out("undecided", why)
        ledger = f"the ledger cannot excuse it ({why})"
    else:
        ledger = f"judged from the journal when the search ran: {judged}"
    if before == "known":
        return out("known", f"{hit.get('known')}; {ledger}", str(hit.get("known")))
    replay = hit.get("replay")
    target, now = sorted(set(broken) & set(replay or [])), before
    if before == "control-broken" and same_judge(stored.control):
        kept = kept_by_control(hit.get("control"), target, same_judge=True)
        if kept:  # the control broke a part of it: confirmed on the rest today (engine.Search.confirm)
            ledger += (f"; confirmed on {', '.join(kept)}: the control ({stored.control}, the same scheduler) broke "
                       f"only {', '.join(sorted(set(target) - set(kept)))} of it")
            target, now = kept, "confirmed"
    if now in ("control-broken", "not-reproduced"):
        return out(now, ledger)
    if now != "confirmed":
        return out(now, f"as recorded ({now}); {ledger}")
    gone = set(broken) & set(replay or []) - set(target)  # what the control broke too (nothing for most hits)
    entry = rules.catalogue.match_confirmed(target, [b for b in broken if b not in gone],
                                            None if replay is None else [b for b in replay if b not in gone],
                                            genome, stored.scheduler, stored.build)
    if entry is not None:
        return out("known", f"{entry.id} (known-findings.yaml: provoked by {entry.signature.provocation()}; "
                            f"{entry.upstream}); {ledger}", entry.id)
    ran = 0 if hit.get("control") is None else 1  # a stored hit keeps one control run's breaks
    if ran < rules.controls:
        return out("under-controlled", f"confirmed on {ran} clean control run{'' if ran == 1 else 's'} of the "
                                       f"{rules.controls} a search asks now; {ledger}")
    return out("confirmed", ledger)


def rejudge(doc: Mapping[str, Any], path: Path, rules: Rules) -> Stored:
    """A stored search.json (its parsed document) re-judged."""
    scheduler = doc.get("scheduler")
    if not isinstance(scheduler, str) or not scheduler:
        raise RejudgeError(f"{path}: field 'scheduler' is {scheduler!r}, not a target's name")
    control = doc.get("control")
    stored = Stored(path, scheduler, doc.get("build"), control if isinstance(control, str) else None,
                    argv=[str(a) for a in doc.get("argv") or []])
    hits = doc.get("hits")
    if hits is None:
        stored.note = ("a minimal case only (`minimal`, `target`): the search's hits were not kept" if "minimal" in doc
                       else "no hits kept")
        return stored
    if not isinstance(hits, list):
        raise RejudgeError(f"{path}: field 'hits' is a {type(hits).__name__}, not a list")
    stored.hits = [rejudge_hit(h, stored, rules, f"{path}: hits[{i}]") if isinstance(h, Mapping) else
                   _not_a_hit(path, i, h) for i, h in enumerate(hits)]
    for i, f in enumerate(doc.get("findings") or []):
        try:
            stored.groups.append(Group(tuple(str(x) for x in f["signature"]), tuple(int(t) for t in f["trials"]),
                                       f.get("reproduced"), f.get("replays")))
        except (KeyError, TypeError, ValueError) as e:
            raise RejudgeError(f"{path}: findings[{i}]: field {e} is missing or not a list") from None
    return stored


def _not_a_hit(path: Path, i: int, h: Any) -> Rejudged:
    raise RejudgeError(f"{path}: hits[{i}] is a {type(h).__name__}, not an object")


def load_doc(path: Path) -> tuple[Path, dict[str, Any]]:
    """A search directory's search.json (or the file itself): its path and document; RejudgeError names the file."""
    file = path / "search.json" if path.is_dir() else path
    try:
        doc = json.loads(file.read_text())
    except OSError as e:
        raise RejudgeError(f"{file}: cannot be read ({e.strerror or e})") from None
    except ValueError as e:
        raise RejudgeError(f"{file}: not JSON ({e})") from None
    if not isinstance(doc, dict):
        raise RejudgeError(f"{file}: a search.json is a JSON object, not {type(doc).__name__}")
    return file, doc


def read(path: Path, rules: Rules) -> Stored:
    """A search directory's search.json (or the file itself) re-judged; RejudgeError names the file and field."""
    file, doc = load_doc(path)
    return rejudge(doc, file, rules)
