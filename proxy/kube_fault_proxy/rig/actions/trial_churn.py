"""Node and pod churn as a search trial's actions: the one table of their names and settings (what the grammar
draws, the genome validates and shrinking weakens), and what performs them (`TrialChurn`; when: trial_runner.py).

An action is plain data, as a rule is: `{"do": "flapNode", "node": 3, "downSeconds": 2.0, "afterBinds": 20}`.
`node` is an index into the trial's schedulable nodes by name (taken modulo their count, so the action still
means a node after shrinking cuts the nodes). Its trigger is exactly one of (read as rig/runs/triggers.py reads
them for a scenario's steps too), plus `after` seconds:
- `afterBinds: N`: once the proxy has answered N Binding POSTs with success since the load began
  (`bindsTotal.succeeded`, as a scenario step's `afterBinds`; at most the load's pods). Under Binding faults the
  successes may never reach N.
- `afterBindAnswers: N`: once the proxy has answered N Binding POSTs since the load began, whatever the answer (a
  success, a throttle, an injected error, a reset; at most the load's pods). It comes under Binding faults too.
- `onFault: K`: once the proxy journals the first firing of a fault since the load began: of kind K (`abort`,
  `reset`, ...), of any rule (`any`), or the first answer a crash point holds (`held`). The search draws K
  from the trial's own rules' kinds, so the action lands while the faults act.
So an action lands between scheduling cycles, during the load, or right at the fault's moment. A `deletePod` on
`onFault` may say `of: faulted`: it deletes the pod the fault's request named (the pod of a held Binding, what a
planned search deletes while its write is held), not one picked from the unbound pods.

What a trial deleted, cordoned or resized is undone when the trial is cleaned (`TrialChurn.undo`): the next trial
finds the nodes the rig last set (its `schedulable` and `shaped` bookkeeping stays true)."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from lightkube import ApiError, Client
from lightkube.types import PatchType

from kube_fault_proxy.kube.kubeapi import HTTPError, Node, Pod
from kube_fault_proxy.proxy.faults import KINDS
from kube_fault_proxy.rig.actions.node_churn import NodeChurn
from kube_fault_proxy.rig.actions.pod_churn import delete_pod
from kube_fault_proxy.rig.invariants.catalogue import Violation
from kube_fault_proxy.rig.invariants.placement import ref
from kube_fault_proxy.rig.runs.triggers import ANY, HELD

Action = dict[str, Any]
QUANTILES = (0.05, 0.2, 0.5, 0.8)  # of the load's pods: the Binding count an action waits for
AFTER = (0.0, 0.5, 1.0)  # seconds more after the trigger
COUNTS = ("afterBinds", "afterBindAnswers")  # the triggers that are a count of Bindings
TRIGGERS = (*COUNTS, "onFault")  # an action has exactly one; the grammar draws one of these, evenly
FAULT_KINDS = tuple(k.kind for k in KINDS)
HOLDERS = frozenset(k.kind for k in KINDS if "kill" in k.traits.trial_needs)  # kinds that hold an answer (held)
ON_FAULT = (ANY, HELD, *FAULT_KINDS)  # what `onFault` may name


@dataclass(frozen=True)
class ActionSpec:
    """One trial action: its settings (name -> the values drawn), whether it names a node, its weaker form (what
    shrinking tries instead of it) and its strength (the simplicity order: weaker is simpler)."""

    name: str
    settings: Mapping[str, tuple[Any, ...]]
    on_node: bool
    strength: int
    weaker: str | None = None
    optional: tuple[str, ...] = ()  # settings that may be left out (drawn out one time in two)
    weight: int = 1  # how often the grammar draws it, against the others' weights (`pick`)


# The one table of the trial actions: the grammar, the genome, shrinking and the trial read it; nothing else in the
# search names an action.
SPECS: dict[str, ActionSpec] = {s.name: s for s in (
    ActionSpec("deleteNode", {}, on_node=True, strength=4, weaker="flapNode"),
    ActionSpec("flapNode", {"downSeconds": (0.5, 2.0, 5.0)}, on_node=True, strength=3, weaker="cordonNode"),
    ActionSpec("resizeNode", {"cpuPercent": (25, 50, 200)}, on_node=True, strength=2),
    # The one pod action against four node actions: drawn evenly it had 1 draw in 5, and a half-hour search makes
    # about 20 draws (its corpus copies them), so a seed could draw it never (seed 47: 0 of 26). Weighted 2 of 6 it
    # has 1 draw in 3; it also does something only while a pod of the load is still unbound at its trigger.
    ActionSpec("deletePod", {"pick": tuple(range(10))}, on_node=False, strength=2, weight=2),
    ActionSpec("cordonNode", {"forSeconds": (1.0, 3.0)}, on_node=True, strength=1, optional=("forSeconds",)),
)}
ACTIONS = tuple(SPECS)
NODE_RANGE = 64  # a node index is drawn below this, and taken modulo the schedulable nodes
MAX_ACTIONS = 2
FAULTED = "faulted"  # deletePod's `of`: the pod the triggering fault's request named
OF = {"deletePod": (FAULTED,)}  # the actions that may name what they act on, and the values


class ActionError(ValueError):
    """An action that is not one: names where (the genome's field and index) and which setting."""


def validate(action: Any, where: str) -> Action:
    """The action, checked: a known `do`, its settings from its table, a trigger; ActionError names the field."""
    if not isinstance(action, dict):
        raise ActionError(f"{where}: an action is a mapping, not {type(action).__name__}")
    name = action.get("do")
    spec = SPECS.get(str(name))
    if spec is None:
        raise ActionError(f"{where}: field 'do' is {name!r}; one of {', '.join(ACTIONS)}")
    allowed = {"do", *TRIGGERS, "after", *spec.settings, *(("node",) if spec.on_node else ()),
               *(("of",) if name in OF else ())}
    if extra := sorted(set(action) - allowed):
        raise ActionError(f"{where}: field {extra[0]!r} is not a setting of {name} "
                          f"(allowed: {', '.join(sorted(allowed))})")
    triggers = [t for t in TRIGGERS if t in action]
    if len(triggers) != 1:
        got = f" (got {', '.join(triggers)})" if triggers else ""
        raise ActionError(f"{where}: an action needs exactly one trigger field of {', '.join(TRIGGERS)}{got}")
    if triggers[0] in COUNTS:
        count = action[triggers[0]]
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ActionError(f"{where}: field {triggers[0]!r} must be an integer of at least 1, not {count!r}")
    elif action["onFault"] not in ON_FAULT:
        raise ActionError(f"{where}: field 'onFault' is {action['onFault']!r}; one of {', '.join(ON_FAULT)}")
    if "of" in action and (action["of"] not in OF[str(name)] or "onFault" not in action):
        raise ActionError(f"{where}: field 'of' of {name} is {action['of']!r}; {', '.join(OF[str(name)])}, and only "
                          "with an onFault trigger (the fault whose request names what to act on)")
    after = action.get("after", 0.0)
    if not isinstance(after, int | float) or isinstance(after, bool) or not 0 <= after <= 60:
        raise ActionError(f"{where}: field 'after' must be seconds from 0 to 60, not {after!r}")
    if spec.on_node:
        node = action.get("node")
        if not isinstance(node, int) or isinstance(node, bool) or node < 0:
            raise ActionError(f"{where}: field 'node' must be a node index of at least 0, not {node!r}")
    for key, values in spec.settings.items():
        if key not in action:
            if key in spec.optional:
                continue
            raise ActionError(f"{where}: {name} needs field {key!r}")
        value = action[key]
        if value not in values or isinstance(value, bool):
            raise ActionError(f"{where}: field {key!r} of {name} is {value!r}; one of "
                              f"{', '.join(str(v) for v in values)}")
    return dict(action)


def parse_actions(asked: str | None, takes: bool, target: str) -> tuple[str, ...]:
    """`search --actions`: some trial actions (in table order), `all` or `none`; by default none (opt in: a seed
    draws what it drew before actions existed, so stored seeds and the tests that pin them still hold); asking
    for some when the target does not `take` them is an error naming `target`. ValueError says what is wrong."""
    if asked is None:
        return ()
    names = tuple(a.strip() for a in asked.split(",") if a.strip())
    if names in (("none",), ()):
        return ()
    if names == ("all",):
        names = ACTIONS
    if unknown := sorted(set(names) - set(ACTIONS)):
        raise ValueError(f"no action {', '.join(unknown)} (some of {', '.join(ACTIONS)}; all; none)")
    if not takes:
        raise ValueError(f"{target}'s trials make workloads; they take no trial action (--actions none)")
    return tuple(a for a in ACTIONS if a in names)


def pick(rng: random.Random, names: Sequence[str]) -> str:
    """One of the allowed actions, drawn by their weights (a node action 1, the pod action 2: node churn and pod
    churn nearer an even share)."""
    return rng.choices(list(names), weights=[SPECS[n].weight for n in names])[0]


def draw(rng: random.Random, name: str, pods: int, kinds: Collection[str] = ()) -> Action:
    """One action of this name, its settings and trigger drawn from the stream: a count of Bindings (succeeded or
    answered), or the first firing of a fault of one of the trial's rules' `kinds` (or of any; with a crash
    point, `held`: its first held answer)."""
    spec = SPECS[name]
    out: Action = {"do": name}
    if spec.on_node:
        out["node"] = rng.randrange(NODE_RANGE)
    for key, values in spec.settings.items():
        if key in spec.optional and rng.random() < 0.5:
            continue
        out[key] = rng.choice(values)
    when = rng.choice(TRIGGERS)
    if when == "onFault":
        named = sorted(set(kinds) & set(FAULT_KINDS))
        out["onFault"] = rng.choice([ANY, *named, *((HELD,) if HOLDERS & set(named) else ())])
    else:
        out[when] = max(1, round(pods * rng.choice(QUANTILES)))
    after = rng.choice(AFTER)
    if after:
        out["after"] = after
    return out


def draw_some(rng: random.Random, names: Sequence[str], pods: int, kinds: Collection[str] = ()) -> tuple[Action, ...]:
    """One or two actions of the allowed names, each drawn by weight (`pick`; the second one time in three);
    `kinds`: the trial's rules'."""
    count = 1 + (1 if MAX_ACTIONS > 1 and rng.random() < 1 / 3 else 0)
    return tuple(draw(rng, pick(rng, names), pods, kinds) for _ in range(count))


def weaker(action: Action) -> Action | None:
    """The action's weaker form (a deleted node flapped, a flap a cordon), on the same node at the same trigger."""
    spec = SPECS[action["do"]]
    if spec.weaker is None:
        return None
    weak = SPECS[spec.weaker]
    out: Action = {"do": weak.name, "node": action["node"]}
    for key, values in weak.settings.items():
        if key not in weak.optional:
            out[key] = values[0]  # the smallest: a flap's shortest down time
    out.update({k: v for k, v in action.items() if k in (*TRIGGERS, "after")})
    return out


def simpler_triggers(action: Action) -> list[tuple[str, Action]]:
    """The action with a simpler trigger (what shrinking tries, each with what it changed): no `after` delay; the
    first firing of any fault rather than of one kind (or of a held answer)."""
    out = []
    if "after" in action:
        out.append((f"{action['do']}: no delay after its trigger", {k: v for k, v in action.items() if k != "after"}))
    if action.get("onFault", ANY) != ANY:
        out.append((f"{action['do']}: on any fault, not {action['onFault']}", {**action, "onFault": ANY}))
    return out


def strength(actions: Sequence[Action]) -> int:
    """How much the actions do (the simplicity order): the sum of their strengths."""
    return sum(SPECS[a["do"]].strength for a in actions)


def trigger_weight(actions: Sequence[Action]) -> int:
    """How particular the actions' triggers are (the simplicity order, after strength): one for a delay, one for
    an `onFault` narrower than `any`."""
    return sum(("after" in a) + (a.get("onFault", ANY) != ANY) for a in actions)


def trigger(action: Action, pods: int) -> int:
    """The Binding count an action of a count trigger waits for: its own, at most the load's pods (a shrunk load
    still reaches it)."""
    key = next(k for k in COUNTS if k in action)
    return max(1, min(int(action[key]), pods))


def when(action: Action) -> str:
    """The action's trigger in words."""
    if "afterBinds" in action:
        return f"after {action['afterBinds']} Bindings"
    if "afterBindAnswers" in action:
        return f"after {action['afterBindAnswers']} Binding answers"
    name = action["onFault"]
    return {ANY: "on the first fault", HELD: "on the first held answer"}.get(name, f"on the first {name}")


def summary(action: Action) -> str:
    """One line naming the action and its trigger, for a step that was not done and for reports."""
    settings = ", ".join(f"{k} {v}" for k, v in action.items() if k not in ("do", *TRIGGERS, "after"))
    after = f" + {action['after']}s" if action.get("after") else ""
    return f"{action['do']}{f' ({settings})' if settings else ''} {when(action)}{after}"


def delete_at_fault(kind: str, actions: Collection[str]) -> Action | None:
    """What a planned search performs while a write of a pod is held: the pod the fault's request named deleted on
    the first firing of `kind`; None when the search's `actions` leave pod deletion out."""
    return {"do": "deletePod", "pick": 0, "onFault": kind, "of": FAULTED} if "deletePod" in actions else None


def faulted_pod(action: Action, record: Mapping[str, Any] | None) -> Action:
    """The action as it is performed: for one that acts `of: faulted`, with `faultedPod` set to the pod (its name)
    the triggering fault's request named, None when that request named no pod; any other action unchanged."""
    if action.get("of") != FAULTED:
        return action
    request = (record or {}).get("request") or {}
    named = request.get("resource") == "pods" and request.get("name")
    return {**action, "faultedPod": str(request["name"]) if named else None}


def _cpu(text: str) -> Decimal:
    return Decimal(text[:-1]) / 1000 if text.endswith("m") else Decimal(text)


def scaled_cpu(cpu: str, percent: int) -> str:
    """A cpu quantity scaled by a percentage, in millicores (at least 1m)."""
    return f"{max(1, int(_cpu(cpu) * 1000 * percent / 100))}m"


@dataclass
class TrialChurn:
    """A trial's node and pod actions on one client: what it deleted (the node churn's books), what it cordoned and
    the capacity each resized node had, so the clean-up can undo all of it."""

    connect: Callable[[], AbstractContextManager[Client]]
    nodes: tuple[str, ...]  # the trial's schedulable nodes, by name: what a node index points into
    namespace: str
    churn: NodeChurn = field(init=False)
    cordons: set[str] = field(default_factory=set)  # nodes an action cordoned (uncordoned at the clean-up)
    capacity: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> its status before a resize
    shrunk: set[str] = field(default_factory=set)  # nodes an action gave less cpu than they had

    def __post_init__(self) -> None:
        self.churn = NodeChurn(self.connect)

    @property
    def lost(self) -> dict[str, float]:
        """The nodes an action deleted: name -> when (epoch s), for the checker."""
        with self.churn.lock:
            return dict(self.churn.lost)

    def node(self, index: int) -> str:
        """The node an index points to."""
        if not self.nodes:
            raise ValueError("the trial has no schedulable node to act on")
        return self.nodes[index % len(self.nodes)]

    def perform(self, action: Action, stop: threading.Event) -> str:
        """Do one action; what was done."""
        name, api = action["do"], self.churn.api
        if name == "deletePod" and action.get("of") == FAULTED:
            pod = action.get("faultedPod")
            if not pod:
                return "deletePod: the fault's request named no pod"
            return delete_pod(api, str(pod), self.namespace)
        if name == "deletePod":
            pending = sorted(p["metadata"]["name"] for p in api.list(Pod, namespace=self.namespace)
                             if not p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp"))
            if not pending:
                return "deletePod: no unbound pod to delete"
            return delete_pod(api, pending[int(action["pick"]) % len(pending)], self.namespace)
        node = self.node(int(action["node"]))
        if name == "deleteNode":
            return self.churn.delete(node)
        if name == "flapNode":
            return self.churn.flap(node, float(action["downSeconds"]), stop)
        if name == "cordonNode":
            self.cordons.add(node)
            what = self.churn.cordon(node, True)
            if "forSeconds" in action:
                stop.wait(float(action["forSeconds"]))
                self.churn.cordon(node, False)
                self.cordons.discard(node)
                what += f", uncordoned it {action['forSeconds']}s later"
            return what
        if name == "resizeNode":
            status = dict(api.get(Node, node).get("status") or {})
            self.capacity.setdefault(node, {k: dict(status.get(k) or {}) for k in ("capacity", "allocatable")})
            cpu = str((status.get("allocatable") or {}).get("cpu", "1"))
            if int(action["cpuPercent"]) < 100:
                self.shrunk.add(node)
            return self.churn.resize(node, scaled_cpu(cpu, int(action["cpuPercent"])), None, None)
        raise ValueError(f"unknown trial action {name!r}")

    def undo(self) -> list[str]:
        """Every node the trial deleted created again, every resize and cordon undone: what was done. Each part is
        tried even when an earlier one fails; the first failure is raised at the end."""
        done: list[str] = []
        failed: Exception | None = None
        parts: list[Callable[[], list[str]]] = [self.churn.restore_all, self._unresize, self._uncordon]
        for part in parts:
            try:
                done += part()
            except (ApiError, HTTPError, ValueError) as e:
                failed = failed or e
        self.churn.close()
        if failed is not None:
            raise failed
        return done

    def _unresize(self) -> list[str]:
        out = []
        for node, status in sorted(self.capacity.items()):
            self.churn.api.patch(Node.Status, node, {"status": status}, patch_type=PatchType.MERGE)
            out.append(f"gave node {node} its capacity again")
        self.capacity.clear()
        return out

    def _uncordon(self) -> list[str]:
        out = [self.churn.cordon(node, False) for node in sorted(self.cordons)]
        self.cordons.clear()
        with self.churn.lock:
            self.churn.cordoned.clear()
        return out


def excuse_missing_nodes(violations: list[Violation], pods: list[dict[str, Any]], lost: Mapping[str, float],
                         shrunk: Collection[str] = ()) -> tuple[list[Violation], list[tuple[Violation, str]]]:
    """(violations kept, those the trial actions explain, each with why it is not one): `missing-node` of a pod
    bound to a node an action deleted (the promise `missing-node` cites is PodGC's: it deletes pods bound to nodes
    that do not exist, in its own time, after a quarantine), and `no-overcommit` on a node an action gave less cpu
    (its pods may have been bound before; the check cannot tell which were bound after the scheduler saw it)."""
    node_of = {ref(p): p["spec"].get("nodeName") for p in pods}
    kept, excused = [], []
    for v in violations:
        node = node_of.get(v.objects[0]) if v.invariant == "missing-node" and v.objects else None
        if node is not None and node in lost:
            excused.append((v, f"a trial action deleted node {node}: PodGC deletes the pods bound to it in its time"))
        elif v.invariant == "no-overcommit" and v.node in shrunk:
            excused.append((v, f"a trial action gave node {v.node} less cpu than its bound pods may have had"))
        else:
            kept.append(v)
    return kept, excused
