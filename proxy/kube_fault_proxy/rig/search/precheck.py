"""A cheap pre-check against the workload's expected requests: rules whose match can never fire in a trial.

A trial activates its profile after the scheduler has listed and started watching, so a rule matching
only lists or watches fires only when something makes the scheduler reconnect (an outage, a reset
upstream connection). The load's binds are over within a second or two, so a rule whose window opens
later (`after`) fires only when another rule holds binds back. kube-scheduler writes a pod only when it
cannot place it, so pod writes are no match there (its writes of ResourceClaims are, on a device workload, and
only there). A count trigger or `afterMatches` above the requests
the load sends never arms, and a probabilistic rule with few Bindings left after its trigger more
likely than not never fires; a namespace the load never uses never matches. Forms (kind and match, from
the grammar's rule names) that have run often and never injected are learned as dead too. A crash point
needs a write the workload makes, as every kind acting on writes: one matching no write verb never fires.

A watch rule is decided when the watch request arrives, so it acts only on a watch the scheduler opens after
activation: after a dropped connection or a restart. After a reset upstream connection or a restart (a crash
point) the schedulers relist every informer through a WatchList; after an outage the clients seen resumed each watch
from its revision (an `expire` on it makes them relist). Such a watch is opened about once per resource
and reopen, so a watch rule with a count of watch requests (`afterMatches`, `every`), a late window, or a
trigger on more Bindings than the last reopen comes at never fires. The schedulers' informers (client-go
1.35 and 1.36) relist through WatchList, never a LIST: a stale-view rule matching only lists never fires on
them, and one matching watches acts only on a WatchList relist, which a resumed watch is not: it needs a
reset or a restart, or an `expire` (or a `cut` with the `expired` error) that makes a resumed watch relist.
YuniKorn asks for protobuf first: a watch whose events a rule edits is asked for in JSON (its Accept allows
it); its other watches stay protobuf, whose events' revisions the proxy reads too, so a stale view has revisions
to serve it from (its own pods' events), as on the JSON targets."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any

from kube_fault_proxy.proxy.faults.crash_point import WRITE_VERBS
from kube_fault_proxy.rig.search.genome import Genome, Rule, fault_kind
from kube_fault_proxy.rig.search.kinds import RELIST_KINDS, REOPEN_KINDS, RESUME_KINDS, SPECS, traits
from kube_fault_proxy.rig.search.waist import DEVICE_RESOURCES
from kube_fault_proxy.rig.workloads.shapes import DEVICE_SHAPES

RECONNECT_ONLY = frozenset({"watch", "list"})  # verbs the scheduler sends before activation, again only on reconnect
NAMESPACE = "s-t0-1"  # what a trial's namespace looks like (s-<trial>-<n>)
DEAD_AFTER = 3  # a form that ran this often and never injected is dead
WRITES_NO_PODS = frozenset({"kube-scheduler"})  # schedulers that patch or update no pod while all goes well
POD_WRITES = frozenset({"patch", "update"})
SCHEDULERS = frozenset({"kube-scheduler", "yunikorn"})  # targets whose trials delete pods only by their action
# client-go 1.35/1.36 informers relist by WatchList, never a LIST
RELIST_BY_WATCHLIST = frozenset({"kube-scheduler", "yunikorn", "kube-controller-manager"})
WRITE_KINDS = frozenset({"write", "resent-write"})  # what a kind acting only on writes acts on (its traits)


def form(rule: Rule) -> str:
    """A rule's form: its kind and match, as the grammar names them (`abort-binding`)."""
    name = str(rule.get("name", ""))
    return name.split("-", 1)[1] if name.startswith("r") and "-" in name else fault_kind(rule)


def _expected(match: Mapping[str, Any], pods: int) -> int | None:
    """Requests the load's pods bring that a match sees (None: unbounded or unknown, e.g. every request)."""
    if match.get("subresources") == ["binding"]:
        return pods
    return None


def _late(rule: Rule) -> bool:
    """Its window opens a while after activation (`after` above 0 s)."""
    after = str((rule.get("when") or {}).get("after", "0s"))
    return after not in ("0s", "0")


def _bind_count(rule: Rule) -> int:
    """The Bindings a rule waits for before it acts (its count trigger on Bindings), 0 if none."""
    trigger = (rule.get("when") or {}).get("trigger") or {}
    on_binds = "count" in trigger and (trigger.get("match") or {}).get("subresources") == ["binding"]
    return int(trigger["count"]) if on_binds else 0


def _watch_timing_fits(rule: Rule, reopen_at: int | None) -> bool:
    """A rule on watches acts on the watch a reopen opens (at `reopen_at` Bindings at the latest, None: unknown):
    no count of watch requests, no late window, no trigger after the last reopen."""
    when = rule.get("when") or {}
    if int(when.get("afterMatches", 0)) > 0 or int(when.get("every", 1)) > 1 or _late(rule):
        return False
    return reopen_at is None or _bind_count(rule) <= reopen_at


def _relists(rule: Rule) -> bool:
    """Whether the rule makes a resumed watch relist (its kind says: expire, or a cut ending it with the 410)."""
    spec = (rule.get("fault") or {}).get(fault_kind(rule))
    return SPECS[fault_kind(rule)].relists(spec if isinstance(spec, dict) else {})


def _deleted_only(rule: Rule) -> bool:
    """Whether a rule edits only DELETED watch events (its `events.types`)."""
    spec = (rule.get("fault") or {}).get(fault_kind(rule))
    types = ((spec.get("events") or {}).get("types") if isinstance(spec, dict) else None) or []
    return bool(types) and set(types) <= {"DELETED"}


def rule_can_fire(rule: Rule, genome: Genome, reconnects: bool, dead: Iterable[str] = (),
                  scheduler: str | None = None, held: bool = True, reopen_at: int | None = None,
                  relists: bool = False) -> bool:
    """Whether one rule can fire on the genome's workload (`held`: another rule holds binds back; `reopen_at`: the
    last Binding count at which the scheduler's watches reopen; `relists`: its informers relist after it)."""
    if form(rule) in set(dead):
        return False
    if _late(rule) and not held:
        return False
    match = rule.get("match") or {}
    resources = set(match.get("resources") or [])
    if scheduler in WRITES_NO_PODS and set(match.get("verbs") or ["get"]) <= POD_WRITES and resources <= {"pods"}:
        return False
    if resources and resources <= DEVICE_RESOURCES and genome.shape not in DEVICE_SHAPES:
        return False  # claims and slices only a device workload's trial brings
    namespaces = match.get("namespaces")
    if namespaces is not None and not any(fnmatch.fnmatchcase(NAMESPACE, n) for n in namespaces):
        return False
    verbs = set(match.get("verbs") or [])
    if verbs and verbs <= RECONNECT_ONLY and not reconnects:
        return False
    if verbs and verbs <= RECONNECT_ONLY and scheduler is not None and not _watch_timing_fits(rule, reopen_at):
        return False
    if traits(fault_kind(rule)).acts_on in WRITE_KINDS and verbs and not verbs & WRITE_VERBS:
        return False
    if _deleted_only(rule) and scheduler in SCHEDULERS and genome.action != "deletePods":
        return False  # a scheduler's trial deletes no pod unless its action does: no DELETED event to edit
    if traits(fault_kind(rule)).watch_requests == "relist" and scheduler in RELIST_BY_WATCHLIST and verbs and (
            verbs <= {"list"} or (verbs <= RECONNECT_ONLY and not relists)):
        return False
    when = rule.get("when") or {}
    expected = _expected(match, genome.pods)
    if expected is not None and int(when.get("afterMatches", 0)) >= expected:
        return False
    trigger = when.get("trigger") or {}
    on_binds = "count" in trigger and (trigger.get("match") or {}).get("subresources") == ["binding"]
    if on_binds and int(trigger["count"]) > genome.pods:
        return False
    if expected is not None and "probability" in rule:  # the chance that no Binding left draws its probability
        left = (expected - (int(trigger["count"]) if on_binds else 0) - int(when.get("afterMatches", 0))) \
            // int(when.get("every", 1))
        if (1 - float(rule.get("probability", 1.0))) ** max(left, 0) > 0.5:
            return False
    return True


def can_inject(genome: Genome, dead: Iterable[str] = (), scheduler: str | None = None) -> bool:
    """Whether a rule of the genome can fire and every rule on watches can (a genome that cannot is a wasted
    trial, or one that draws a watch kind it never searches)."""
    dead = set(dead)
    prompt = [r for r in genome.rules if rule_can_fire(r, genome, False, dead, scheduler, held=False)]
    held = any(not (r.get("match") or {}).get("verbs") or "create" in r["match"]["verbs"] for r in prompt)
    reopens = [r for r in genome.rules if fault_kind(r) in REOPEN_KINDS
               and rule_can_fire(r, genome, False, dead, scheduler, held)]
    reconnects = bool(reopens)
    reopen_at = max((_bind_count(r) + int((r.get("when") or {}).get("afterMatches", 0)) for r in reopens), default=0)
    resumed = any(fault_kind(r) in RESUME_KINDS for r in reopens)  # expire acts on a resumed watch only
    relists = any(fault_kind(r) in RELIST_KINDS for r in reopens) or (
        resumed and any(_relists(r) for r in genome.rules))
    fires = [rule_can_fire(r, genome, reconnects and (resumed or traits(fault_kind(r)).watch_requests != "resumed"),
                           dead, scheduler, held, reopen_at, relists) for r in genome.rules]
    on_watches = [f for r, f in zip(genome.rules, fires, strict=True)
                  if set((r.get("match") or {}).get("verbs") or []) == {"watch"}]
    return any(fires) and all(on_watches)


def dead_forms(ran: Mapping[str, int], fired: Mapping[str, int]) -> set[str]:
    """Forms that ran at least DEAD_AFTER times and never injected."""
    return {f for f, n in ran.items() if n >= DEAD_AFTER and not fired.get(f)}
