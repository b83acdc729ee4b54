"""A trial's genome: the profile's rules as plain data, a workload action, the load size, a seed.

Rules are kept as the YAML-shaped dicts a profile file holds, so every generated or shrunk genome
is checked by the one strict loader (`profile_loader.validate`) before it is ever run."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from kube_fault_proxy.proxy.profiles.loader import load_text
from kube_fault_proxy.proxy.profiles.profile import API_VERSION, KIND, FaultProfile
from kube_fault_proxy.rig.actions import trial_churn
from kube_fault_proxy.rig.search.kinds import traits

Rule = dict[str, Any]
ACTIONS = ("touchPods", "deletePods")


@dataclass(frozen=True)
class Genome:
    """Everything a trial varies; frozen, compared and cached by its canonical JSON."""

    rules: tuple[Rule, ...]
    pods: int = 100
    action: str | None = None  # one of ACTIONS, done once the faulted load has gone quiet
    seed: int = 1  # the profile's seed for every probabilistic choice
    nodes: int | None = None  # schedulable nodes (the rest cordoned); None: every node of the rig
    shape: str = "roomy"  # the workload shape (rig.shapes.SHAPES); roomy is the weakest form
    # Node and pod churn during the faulted load (rig/actions/trial_churn.py: its table, triggers, settings).
    churn: tuple[trial_churn.Action, ...] = ()
    origin: str = field(default="random", compare=False)

    def canonical(self) -> str:
        """The genome as sorted JSON (what the cache and the simplicity order see); `nodes` only when
        set, `shape` only when tight and `churn` only when there is some, so a genome drawn before shrinking (or
        before trial actions existed) keeps its digest."""
        doc: dict[str, Any] = {"rules": self.rules, "pods": self.pods, "action": self.action, "seed": self.seed}
        if self.nodes is not None:
            doc["nodes"] = self.nodes
        if self.shape != "roomy":
            doc["shape"] = self.shape
        if self.churn:
            doc["churn"] = list(self.churn)
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_doc(cls, doc: Any, where: str, origin: str = "random") -> Genome:
        """A genome from its JSON form (a canonical string or its object, as search.json and trials.jsonl hold
        it); a stored genome without `churn`, `nodes` or `shape` (written before they existed) still loads.
        ValueError names `where` and the field (an action's: `where`: churn[i])."""
        try:
            g = json.loads(doc) if isinstance(doc, str) else doc
        except json.JSONDecodeError as e:
            raise ValueError(f"{where} is not a genome (not JSON: {e})") from None
        try:
            if not isinstance(g, dict):
                raise ValueError(f"{where} is not a genome (a {type(g).__name__}, not a mapping)")
            churn = g.get("churn") or []
            if not isinstance(churn, list):
                raise ValueError(f"{where} is not a genome (its field 'churn' is not a list of actions)")
            nodes = g.get("nodes")
            return cls(rules=tuple(g["rules"]), pods=int(g["pods"]), action=g.get("action"), seed=int(g["seed"]),
                       nodes=None if nodes is None else int(nodes), shape=str(g.get("shape", "roomy")),
                       churn=tuple(trial_churn.validate(a, f"{where}: churn[{i}]") for i, a in enumerate(churn)),
                       origin=origin)
        except KeyError as e:
            raise ValueError(f"{where} is not a genome (no field {e.args[0]!r})") from None
        except TypeError as e:
            raise ValueError(f"{where} is not a genome ({e})") from None

    def digest(self) -> str:
        """A short hash of the canonical form."""
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:12]

    def with_(self, **changes: Any) -> Genome:
        """A copy with some fields changed."""
        return replace(self, **changes)

    def document(self, name: str, description: str = "") -> dict[str, Any]:
        """The FaultProfile document (plain data) this genome stands for."""
        meta: dict[str, Any] = {"name": name}
        if description:
            meta["description"] = description
        return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta,
                "spec": {"seed": self.seed, "rules": [dict(r) for r in self.rules]}}

    def to_yaml(self, name: str, description: str = "") -> str:
        """The profile as YAML text."""
        return str(yaml.safe_dump(self.document(name, description), sort_keys=False))

    def profile(self, name: str = "search-candidate") -> FaultProfile:
        """Rendered to YAML and loaded back through the strict loader; raises ProfileError."""
        return load_text(self.to_yaml(name), f"<genome {self.digest()}>")


def valid(genome: Genome) -> bool:
    """Whether the strict loader accepts the genome's profile."""
    from kube_fault_proxy.proxy.profiles.loader import ProfileError

    try:
        genome.profile()
    except ProfileError:
        return False
    return True


def fault_kind(rule: Rule) -> str:
    """The rule's fault kind (the one key under `fault`)."""
    return str(next(iter(rule["fault"])))


def simplicity(genome: Genome) -> tuple[Any, ...]:
    """Shortlex-like order: fewer rules, no action, fewer and weaker trial actions on plainer triggers, the roomy
    shape, fewer optional fields, less fault mass, fewer pods, fewer nodes, then the canonical text. A shrink step is
    taken only when this strictly decreases."""
    fields = sum(_count_fields(r) for r in genome.rules)
    mass = sum(_mass(r) for r in genome.rules)
    nodes = genome.nodes if genome.nodes is not None else 1 << 30
    return (len(genome.rules), genome.action is not None, len(genome.churn), trial_churn.strength(genome.churn),
            trial_churn.trigger_weight(genome.churn), genome.shape != "roomy", fields, round(mass, 3),
            genome.pods, nodes, genome.canonical())


def _count_fields(value: Any) -> int:
    if isinstance(value, dict):
        return sum(1 + _count_fields(v) for v in value.values())
    if isinstance(value, list):
        return sum(_count_fields(v) for v in value) + len(value)
    return 0


def _mass(rule: Rule) -> float:
    """Roughly how much fault a rule can inject: injections x seconds x probability; a later trigger is more,
    but a later crash point less (fewer of the load's pods are left to feel it)."""
    when = rule.get("when") or {}
    inj = float(when.get("maxInjections", 1000))
    kind = fault_kind(rule)
    spec = rule["fault"][kind] or {}
    own = traits(kind)
    seconds = float(spec.get(own.duration, 1.0)) if isinstance(spec, dict) and own.duration else 1.0
    trigger: dict[str, Any] = when.get("trigger") or {}
    point = float(trigger.get("count", 0)) / 1000
    return inj * seconds * float(rule.get("probability", 1.0)) + (-point if own.at_a_count else point)
