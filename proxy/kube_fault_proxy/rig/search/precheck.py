"""A cheap pre-check against the workload's expected requests: rules whose match can never fire in a trial.

A trial activates its profile after the scheduler has listed and started watching, so a rule matching
only lists or watches fires only when something makes the scheduler reconnect (an outage, a reset
upstream connection). The load's binds are over within a second or two, so a rule whose window opens
later (`after`) fires only when another rule holds binds back. kube-scheduler writes a pod only when it
cannot place it, so pod writes are no match there. A count trigger or `afterMatches` above the requests
the load sends never arms, and a probabilistic rule with few Bindings left after its trigger more
likely than not never fires; a namespace the load never uses never matches. Forms (kind and match, from
the grammar's rule names) that have run often and never injected are learned as dead too. A crash point
needs a write the workload makes: one matching no write verb never fires. The schedulers' informers
(client-go 1.36) relist through WatchList, never a LIST: a staleList rule matching only lists never fires
on them, one matching watches acts on their WatchList relists."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any

from kube_fault_proxy.proxy.faults.crash_point import WRITE_VERBS
from kube_fault_proxy.rig.search.genome import Genome, Rule, fault_kind
from kube_fault_proxy.rig.search.grammar import CONNECTION_KINDS

RECONNECT_ONLY = frozenset({"watch", "list"})  # verbs the scheduler sends before activation, again only on reconnect
NAMESPACE = "s-t0-1"  # what a trial's namespace looks like (s-<trial>-<n>)
DEAD_AFTER = 3  # a form that ran this often and never injected is dead
WRITES_NO_PODS = frozenset({"kube-scheduler"})  # schedulers that patch or update no pod while all goes well
POD_WRITES = frozenset({"patch", "update"})
RELIST_BY_WATCHLIST = frozenset({"kube-scheduler", "yunikorn"})  # client-go 1.36 informers: WatchList, no LIST


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


def rule_can_fire(rule: Rule, genome: Genome, reconnects: bool, dead: Iterable[str] = (),
                  scheduler: str | None = None, held: bool = True) -> bool:
    """Whether one rule can fire on the genome's workload (`held`: another rule holds binds back)."""
    if form(rule) in set(dead):
        return False
    if _late(rule) and not held:
        return False
    match = rule.get("match") or {}
    if scheduler in WRITES_NO_PODS and set(match.get("verbs") or ["get"]) <= POD_WRITES:
        return False
    namespaces = match.get("namespaces")
    if namespaces is not None and not any(fnmatch.fnmatchcase(NAMESPACE, n) for n in namespaces):
        return False
    verbs = set(match.get("verbs") or [])
    if verbs and verbs <= RECONNECT_ONLY and not reconnects:
        return False
    if fault_kind(rule) == "crashPoint" and verbs and not verbs & WRITE_VERBS:
        return False
    if fault_kind(rule) == "staleList" and scheduler in RELIST_BY_WATCHLIST and verbs and verbs <= {"list"}:
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
    """Whether any rule of the genome can fire (a genome that cannot is a wasted trial)."""
    dead = set(dead)
    prompt = [r for r in genome.rules if rule_can_fire(r, genome, False, dead, scheduler, held=False)]
    held = any(not (r.get("match") or {}).get("verbs") or "create" in r["match"]["verbs"] for r in prompt)
    reconnects = any(fault_kind(r) in CONNECTION_KINDS and rule_can_fire(r, genome, False, dead, scheduler, held)
                     for r in genome.rules)
    return any(rule_can_fire(r, genome, reconnects, dead, scheduler, held) for r in genome.rules)


def dead_forms(ran: Mapping[str, int], fired: Mapping[str, int]) -> set[str]:
    """Forms that ran at least DEAD_AFTER times and never injected."""
    return {f for f, n in ran.items() if n >= DEAD_AFTER and not fired.get(f)}
