"""Excuses: which effects in the ledger (ledger.py) excuse which deviation from an invariant, by count and by
duration. A deviation within its excuse is the fault's effect (counted and shown, never a finding); beyond it, it
is a finding, and its text says what was excused and what was not.

Pure: violations (as `Violation.as_dict` writes them), a Ledger and, for the controllers, the recorded History in;
a Judgement out. One rule per invariant (RULES); an invariant with no rule is never excused.

- **A surplus of live pods** (`replicaset-never-over-replicas` of a ReplicaSet, `job-active-within-parallelism`,
  `daemonset-one-pod-per-node`): a pod create the client saw fail although it committed (committed-unanswered,
  or committed-after-error) makes the controller create the pod again; upstream allows that ("the same program
  may sometimes be started twice", Job docs). A pod create a cut failed in flight (cut-in-flight: forwarded, not
  yet answered when resetUpstream or an outage closed its connection) may have committed too, and counts the
  same: the excuse is an upper bound. Each such create of the owner excuses one surplus pod, until the
  controller removes it: the stretches of surplus in the history, in order, must peak at no more pods together
  than the owner's lost creates so far (each create excuses one pod once), and each must end within `bound`
  seconds of its start (of the faults' end, if that is later: the delete
  that removes it is a write the faults may fail too). Two surplus pods after one lost answer, or a surplus
  never removed, are findings.
- **An extra success** (`job-never-over-completions`, `indexed-job-one-success-per-index`): a duplicate that ran
  to completion stays succeeded; each lost create of the Job excuses one extra succeeded pod (of an Indexed Job,
  one of the index its pod has).
- **A node over its allocatable** (`no-overcommit`): a Binding that committed while the scheduler saw it fail
  (committed-after-error, or committed-unanswered) left the pod on its node while the scheduler, believing the
  bind failed, forgot it and counted its room free ("ForgetPod removes an assumed pod from cache", the scheduler's
  cache); another pod may then take that room until the scheduler's informer sees the bind. The kubelet's
  admission is the guard for that window (it refuses a pod that does not fit). Each such Binding of a pod on the
  node excuses that pod's requests: the excess must be at most the lost binds' pods times the smallest request
  of a pod on the node (the violation's `smallest`, so the excuse never exceeds what those pods could hold).
- **A pod no scheduler learned of** (`stranded`, `I3`, `no-pod-waits-past-bound`, and `scheduler-not-stuck` of
  its probe pod): each pod whose own ADDED event the proxy dropped, where the workload never updated the pod again
  (touchPods re-announces it), may stay unscheduled: the scheduler never saw it. A watch a rule edited stays
  edited after the profile is off, so a probe created after the faults can lose its ADDED event too.
- **A pod no scheduler could place** (`stranded` only): where every node with room for the pod (the violation's
  `room`, each with its resourceVersion at the check) lost its last ADDED event on a node watch to the proxy, the
  scheduler never learned of any node the pod fits on. Only while nothing announced the node again: it is
  unchanged since that event (same resourceVersion, so no MODIFIED was sent), no connection was cut or outage
  begun after it (no relist), and its watch was younger than client-go's shortest watch (`WATCH_SHORTEST`) at
  the check. A pod that fits on any other node, or a node that changed, is a finding.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kube_fault_proxy.rig.controllers.world import completion_index, owner
from kube_fault_proxy.rig.invariants.check import Report
from kube_fault_proxy.rig.invariants.history import History
from kube_fault_proxy.rig.invariants.history_facts import Facts, facts
from kube_fault_proxy.rig.invariants.ledger import Effect, EffectKind, Ledger

TEXT_SHOWN = 2  # reasons of one invariant a Judgement's text shows before it counts the rest
SYNC_BOUND = 30.0  # seconds a controller has to remove an excused surplus pod (its next sync, plus its backoff)
LOST_CREATES: tuple[EffectKind, ...] = ("committed-unanswered", "committed-after-error")
# A pod create the controller saw fail that may have committed: a lost create, or one cut in flight (its commit
# unknown; counting it is the upper bound the journal proves). Bindings cut in flight are not counted (no-overcommit).
LOST_POD_CREATES: tuple[EffectKind, ...] = (*LOST_CREATES, "cut-in-flight")
STRANDING = frozenset({"stranded", "I3", "no-pod-waits-past-bound", "scheduler-not-stuck"})
# client-go's reflector asks each watch for timeoutSeconds = minWatchTimeout (5 min) * (1 + rand): a watch younger
# than this has not ended on its own, so its client has not listed again (tools/cache/reflector.go).
WATCH_SHORTEST = 300.0


@dataclass(frozen=True)
class Excuse:
    """One violation, whether the ledger excuses it, and why (what was excused and what was not)."""

    invariant: str
    objects: tuple[str, ...]
    excused: bool
    why: str

    def as_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"invariant": self.invariant, "objects": list(self.objects), "excused": self.excused,
                "why": self.why}


@dataclass(frozen=True)
class Judgement:
    """Every violation of a run, each excused or not."""

    excuses: tuple[Excuse, ...] = ()

    @property
    def excused(self) -> list[Excuse]:
        return [e for e in self.excuses if e.excused]

    @property
    def findings(self) -> list[Excuse]:
        """The violations beyond their excuse (or with none)."""
        return [e for e in self.excuses if not e.excused]

    @property
    def fully_excused(self) -> bool:
        """Something broke, and the ledger excuses every break."""
        return bool(self.excuses) and not self.findings

    def text(self) -> str:
        """What the ledger excused, then what it did not: per invariant its first TEXT_SHOWN reasons (repeats
        dropped), then how many more (a trial's `stranded` names every pod; `as_dict` keeps them all)."""
        parts = []
        for label, group in (("excused", self.excused), ("not excused", self.findings)):
            whys: dict[str, list[str]] = {}
            for e in group:
                whys.setdefault(e.invariant, []).append(e.why)
            for invariant, said in whys.items():
                unique = list(dict.fromkeys(said))
                parts += [f"{label}: {why}" for why in unique[:TEXT_SHOWN]]
                if len(unique) > TEXT_SHOWN:
                    parts.append(f"{label}: {len(unique) - TEXT_SHOWN} more {invariant} like these")
        return "; ".join(parts)


@dataclass(frozen=True)
class Context:
    """What a rule judges by."""

    ledger: Ledger
    facts: Facts | None
    faults_end: float | None
    bound: float
    reannounced: bool  # the workload updated every pod after the faults (touchPods)
    t0: float


Rule = Callable[[Mapping[str, Any], Context], Excuse]


def _lost_creates(ctx: Context, owner_kind: str, owner_ref: str, owner_uid: str) -> list[Effect]:
    """Pod creates of this owner that committed while their client saw an error, or a cut failed in flight: by the
    owner the journal's `written` (or `inFlight`) names (its uid, or its kind and name), else by the pod's owner in
    the history."""
    out = []
    for e in ctx.ledger.of(*LOST_POD_CREATES, resource="pods", verb="create"):
        t = e.touched
        pod = ctx.facts.pods.get((t.namespace, t.name)) if ctx.facts is not None else None
        o = owner(pod) if pod is not None else None
        named = t.owner_kind == owner_kind and f"{t.namespace}/{t.owner_name}" == owner_ref
        if (owner_uid and t.owner_uid == owner_uid) or named or (o is not None and o[1] == owner_uid):
            out.append(e)
    return out


def _creates(effects: Sequence[Effect], ctx: Context) -> str:
    def one(e: Effect) -> str:
        t = e.touched
        name = t.name or (f"{t.generate_name}*" if t.generate_name else "(unnamed)")
        cut = f", cut in flight by {e.fault}" if e.kind == "cut-in-flight" else ""
        return f"{t.namespace}/{name} at {e.time - ctx.t0:.1f}s{cut}"
    names = ", ".join(one(e) for e in effects[:3])
    more = f" and {len(effects) - 3} more" if len(effects) > 3 else ""
    how = "committed unanswered or cut in flight" if any(e.kind == "cut-in-flight" for e in effects) else \
        "committed unanswered"
    return f"{_n(len(effects), 'pod create')} {how} ({names}{more})" if effects else \
        "no pod create committed unanswered"


OWNER_KIND = {"replicaset-never-over-replicas": "ReplicaSet", "job-active-within-parallelism": "Job",
              "daemonset-one-pod-per-node": "DaemonSet", "job-never-over-completions": "Job",
              "indexed-job-one-success-per-index": "Job"}


def _owner(v: Mapping[str, Any], ctx: Context) -> tuple[str, str, str] | None:
    """(kind, ref, uid) of the workload a controller violation is about (uid '' with no history to look it up)."""
    kind, objects = OWNER_KIND[v["invariant"]], v.get("objects") or []
    if not objects:
        return None
    u = ctx.facts.workloads.get((kind, str(objects[0])), "") if ctx.facts is not None else ""
    return kind, str(objects[0]), u


def _n(count: int, noun: str) -> str:
    """`1 surplus pod`, `2 surplus pods`, `2 stretches`."""
    return f"{count} {noun}" + ("" if count == 1 else "es" if noun.endswith("ch") else "s")


def _no(v: Mapping[str, Any], why: str) -> Excuse:
    return Excuse(str(v["invariant"]), tuple(v.get("objects") or ()), False, why)


def surplus_rule(v: Mapping[str, Any], ctx: Context) -> Excuse:
    """Each lost pod create of the owner excuses one surplus pod, removed within the bound: the stretches of surplus,
    in order, may together hold no more pods than the lost creates before each one ends."""
    if v["invariant"] == "replicaset-never-over-replicas" and v.get("kind") == "deployment":
        return _no(v, f"{v['objects'][0]}: a Deployment's ReplicaSets asking over replicas + maxSurge (no ledger "
                      "effect excuses it: a ReplicaSet's name is fixed, a lost create of one is not made twice)")
    found = _owner(v, ctx)
    if found is None or ctx.facts is None:
        return _no(v, f"{', '.join(v.get('objects') or [])}: no recorded history to measure the surplus by (how "
                      "long it lasted is part of the excuse)")
    kind, name, owner_uid = found
    node = str(v.get("node") or "")
    stretches = ctx.facts.surplus.get((owner_uid, node), []) if ctx.facts is not None else []
    lost = _lost_creates(ctx, kind, name, owner_uid)
    where = f"{kind} {name}" + (f" on node {node}" if node else "")
    if not stretches:
        return _no(v, f"{where}: the history shows no stretch of surplus to excuse")
    spent = 0  # lost creates whose duplicate an earlier stretch already counted: each excuses one pod, once
    for s in stretches:
        allowed = [e for e in lost if s.end is None or e.time <= s.end]
        surplus = f"{where}: {_n(s.peak, 'surplus pod')} from {s.start - ctx.t0:.1f}s"
        if spent + s.peak > len(allowed):
            left = max(0, len(allowed) - spent)
            earlier = f", {spent} of them spent on an earlier surplus" if spent else ""
            return _no(v, f"{surplus}; the ledger excuses {left} ({_creates(allowed, ctx)}{earlier}); "
                          f"{s.peak - left} not excused")
        spent += s.peak
        if s.end is None:
            return _no(v, f"{surplus}, excused by {_creates(allowed, ctx)}, never removed (the history ends "
                          f"{ctx.facts.end - s.start if ctx.facts else 0:.1f}s later)")
        deadline = max(s.start, ctx.faults_end or s.start) + ctx.bound
        if s.end > deadline:
            return _no(v, f"{surplus}, excused by {_creates(allowed, ctx)}, removed only {s.end - s.start:.1f}s "
                          f"later, past the bound ({ctx.bound:g}s from its start or the faults' end)")
    worst = max(stretches, key=lambda s: s.peak)
    return Excuse(str(v["invariant"]), tuple(v.get("objects") or ()), True,
                  f"{where}: at most {_n(worst.peak, 'surplus pod')} ({_n(len(stretches), 'stretch')}), each within "
                  f"{_creates(lost, ctx)} and removed within the bound ({ctx.bound:g}s)")


def success_rule(v: Mapping[str, Any], ctx: Context) -> Excuse:
    """Each lost pod create of the Job excuses one extra succeeded pod (of an Indexed Job, of its pod's index)."""
    found = _owner(v, ctx)
    if found is None:
        return _no(v, f"{v['invariant']}: the violation names no Job")
    kind, name, job_uid = found
    numbers = v.get("numbers") or {}
    lost = _lost_creates(ctx, kind, name, job_uid)
    # The violation's numbers are its first moment's; the history has every pod that ever succeeded.
    done = list(ctx.facts.succeeded.get(job_uid, {}).values()) if ctx.facts is not None else []
    if v["invariant"] == "indexed-job-one-success-per-index":
        index = int(numbers.get("index", -1))
        lost = [e for e in lost if ctx.facts is not None and (pod := ctx.facts.pods.get(
            (e.touched.namespace, e.touched.name))) is not None and completion_index(pod) == index]
        twins = sum(1 for p in done if completion_index(p) == index)
        extra, what = max(twins, int(numbers.get("succeeded", 0))) - 1, f"Job {name} index {index}"
    else:
        extra = max(len(done), int(numbers.get("succeeded", 0))) - int(numbers.get("completions", 0))
        what = f"Job {name}"
    if extra <= len(lost):
        return Excuse(str(v["invariant"]), tuple(v.get("objects") or ()), True,
                      f"{what}: {_n(extra, 'extra succeeded pod')}, within {_creates(lost, ctx)}")
    return _no(v, f"{what}: {_n(extra, 'extra succeeded pod')}; the ledger excuses {len(lost)} "
                  f"({_creates(lost, ctx)}); {extra - len(lost)} not excused")


def _pod_key(obj: str) -> tuple[str | None, str]:
    ns, _, name = obj.rpartition("/")
    return (ns or None), name


def _pod_route(objects: Sequence[str], v: Mapping[str, Any], ctx: Context) -> tuple[bool, str]:
    """(whether each pod's own ADDED was dropped and never re-announced, why)."""
    if ctx.reannounced:
        return False, (f"{', '.join(objects)}: the workload updated every pod after the faults (touchPods), which "
                       "re-announces a pod whose ADDED was dropped")
    dropped = ctx.ledger.of("event-dropped", verb="ADDED")
    lost = [o for o in objects if not any(
        e.touched.name == _pod_key(o)[1] and _pod_key(o)[0] in (None, e.touched.namespace) for e in dropped)]
    if lost:
        return False, f"{', '.join(lost)}: {v['invariant']} with no dropped ADDED event of the pod in the ledger"
    names = ", ".join(objects[:3]) + (f" and {len(objects) - 3} more" if len(objects) > 3 else "")
    return True, (f"the proxy dropped the ADDED watch event of {names} (dropEvents) and nothing re-announced "
                  f"{'it' if len(objects) == 1 else 'them'}: the scheduler never learned of the pod")


def _unannounced(node: str, revision: str, at: float, ctx: Context) -> tuple[bool, str]:
    """(whether the journal proves the scheduler never learned of this node, why): its last ADDED on a node watch
    was dropped, the node is unchanged since (no MODIFIED to announce it), no connection was cut after (no relist),
    and that watch was younger than client-go's shortest at the check (it had not ended and relisted)."""
    drops = [e for e in ctx.ledger.of("event-dropped", resource="nodes", verb="ADDED") if e.touched.name == node]
    if not drops:
        return False, f"node {node} lost no ADDED event in the ledger"
    last = drops[-1]
    when = f"node {node}'s ADDED dropped at {last.time - ctx.t0:.1f}s"
    if not revision or not last.revision:
        return False, f"{when}, and no resourceVersion says whether it changed since"
    if revision != last.revision:
        return False, (f"{when} (resourceVersion {last.revision}), and the node changed since ({revision} at the "
                       "check): its next event announces it")
    cut = next((e for e in ctx.ledger.of("connection-cut", "outage") if e.time > last.time), None)
    if cut is not None:
        return False, (f"{when}, then {'an outage' if cut.kind == 'outage' else 'a connection cut'} at "
                       f"{cut.time - ctx.t0:.1f}s: the scheduler may have listed the nodes again")
    if not last.opened:
        return False, f"{when}, on a watch the journal does not say was opened"
    if at - last.opened >= WATCH_SHORTEST:
        return False, (f"{when}, on a watch open {at - last.opened:.0f}s by the check, past client-go's shortest "
                       f"({WATCH_SHORTEST:g}s): it may have ended and listed the nodes again")
    return True, when


def _node_route(v: Mapping[str, Any], ctx: Context) -> tuple[bool, str]:
    """(whether every node with room for a stranded pod is one the scheduler never learned of, why)."""
    room = v.get("room") or {}
    at = (v.get("numbers") or {}).get("checkedAt")
    pod = ", ".join(str(o) for o in v.get("objects") or [])
    if not room or not isinstance(at, int | float):
        return False, f"{pod}: the violation names no node with room (or no moment of the check)"
    said = [_unannounced(str(n), str(r), float(at), ctx) for n, r in sorted(room.items())]
    known = [why for ok, why in said if not ok]
    if known:
        return False, f"{pod}: not every node with room is unknown to the scheduler ({'; '.join(known[:2])})"
    nodes = ", ".join(sorted(room))
    return True, (f"{pod}: every node with room for it ({nodes}) lost its ADDED watch event to the proxy "
                  f"(dropEvents) and nothing announced it again ({'; '.join(why for _, why in said[:2])}; unchanged "
                  "since, no connection cut after, its watch younger than client-go's shortest): the scheduler "
                  "never learned of a node the pod fits on")


def stranding_rule(v: Mapping[str, Any], ctx: Context) -> Excuse:
    """Each pod whose own ADDED the proxy dropped, never re-announced, may stay unscheduled; and a `stranded` pod
    whose every node with room is one whose ADDED the proxy dropped, never announced again."""
    objects = [str(o) for o in v.get("objects") or []]
    if not objects:
        return _no(v, f"{v['invariant']}: the violation names no pod")
    excused, why = _pod_route(objects, v, ctx)
    if excused:
        return Excuse(str(v["invariant"]), tuple(objects), True, why)
    if v["invariant"] != "stranded" or not v.get("room"):
        return _no(v, why)
    excused, by_nodes = _node_route(v, ctx)
    return Excuse(str(v["invariant"]), tuple(objects), True, by_nodes) if excused else _no(v, f"{why}; {by_nodes}")


def overcommit_rule(v: Mapping[str, Any], ctx: Context) -> Excuse:
    """Each Binding of a pod on the node that committed while the scheduler saw it fail excuses that pod's room."""
    objects = [str(o) for o in v.get("objects") or []]
    numbers, node, resource = v.get("numbers") or {}, str(v.get("node") or "?"), str(v.get("kind") or "?")
    on_node = {_pod_key(o) for o in objects}
    lost = [e for e in ctx.ledger.of(*LOST_CREATES, resource="pods", verb="create/binding")
            if (e.touched.namespace or None, e.touched.name) in on_node or (None, e.touched.name) in on_node]
    pods = sorted({f"{e.touched.namespace}/{e.touched.name}" for e in lost})
    excess = float(numbers.get("requested", 0)) - float(numbers.get("allocatable", 0))
    room = len(pods) * float(numbers.get("smallest", 0))
    what = f"{node} {resource}: {excess:g} over allocatable"
    if not pods:
        return _no(v, f"{what}, and no Binding of its pods committed while the scheduler saw it fail")
    names = ", ".join(pods[:3]) + (f" and {len(pods) - 3} more" if len(pods) > 3 else "")
    if excess > room + 1e-9:
        return _no(v, f"{what}; the ledger excuses at most {room:g} ({_n(len(pods), 'Binding')} committed while "
                      f"the scheduler saw them fail: {names}); {excess - room:g} not excused")
    return Excuse(str(v["invariant"]), tuple(objects), True,
                  f"{what}, within the room of {_n(len(pods), 'pod')} whose Binding committed while the scheduler "
                  f"saw it fail ({names}): it forgot them and placed others there")


RULES: dict[str, Rule] = {
    "no-overcommit": overcommit_rule,
    "replicaset-never-over-replicas": surplus_rule,
    "job-active-within-parallelism": surplus_rule,
    "daemonset-one-pod-per-node": surplus_rule,
    "job-never-over-completions": success_rule,
    "indexed-job-one-success-per-index": success_rule,
    **{name: stranding_rule for name in sorted(STRANDING)},
}


def excuse_report(report: Report, ledger: Ledger, history: History | None = None,
                  faults_end: float | None = None) -> list[str]:
    """Move the report's violations the ledger excuses to `report.excused`; returns what the ledger excused and
    what it did not, for the violations a rule judged (one line each)."""
    judged = judge([v.as_dict() for v in report.violations], ledger, history, faults_end)
    pairs = list(zip(report.violations, judged.excuses, strict=True))
    report.excused += [(v, e.why) for v, e in pairs if e.excused]
    report.violations = [v for v, e in pairs if not e.excused]
    return [f"{'excused' if e.excused else 'not excused'}: {e.why}" for e in judged.excuses
            if e.invariant in RULES]


def judge(violations: Sequence[Mapping[str, Any]], ledger: Ledger, history: History | None = None,
          faults_end: float | None = None, bound: float = SYNC_BOUND, reannounced: bool = False,
          t0: float | None = None) -> Judgement:
    """Each violation excused by the ledger, or not (with why). `t0`: times in the texts are seconds after it
    (default: the history's start, else the first effect's time)."""
    start = t0 if t0 is not None else history.start if history is not None else \
        min((e.time for e in ledger.effects), default=0.0)
    ctx = Context(ledger, facts(history) if history is not None else None, faults_end, bound, reannounced, start)
    out = []
    for v in violations:
        rule = RULES.get(str(v.get("invariant")))
        out.append(rule(v, ctx) if rule is not None else
                   _no(v, f"{v.get('invariant')}: no ledger effect excuses it"))
    return Judgement(tuple(out))
