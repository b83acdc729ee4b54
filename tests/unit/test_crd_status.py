"""When status is written: state changes at once, counters at most every interval, nothing when idle."""

from __future__ import annotations

from typing import Any

from kube_fault_proxy.proxy.crd.objects import Condition, ProxyStatus
from kube_fault_proxy.proxy.crd.status import StatusThrottle, Write, as_entry

KEY = ("ns", "act")


def status(injections: int = 0, reason: str = "Applied", active: bool = True) -> ProxyStatus:
    return ProxyStatus(name="a", active=active, epoch=1, injections=injections, conditions=[
        Condition(type="Applied", status="True" if active else "False", reason=reason,
                  lastTransitionTime="2027-01-01T00:00:00Z")])


def obj(entry: dict[str, Any] | None = None, uid: str = "u1", others: int = 0) -> dict[str, Any]:
    proxies = [{"name": f"other-{i}", "active": True} for i in range(others)] + ([entry] if entry else [])
    return {"metadata": {"name": "act", "namespace": "ns", "uid": uid}, "status": {"proxies": proxies}}


def test_state_changes_are_written_at_once_counters_at_most_every_interval() -> None:
    t = StatusThrottle("a", interval=5.0)
    objects = {KEY: obj()}
    [w] = t.due({KEY: status()}, objects, now=100.0)
    assert w == Write(KEY, "u1", as_entry(status()))
    t.wrote(w, 100.0)
    assert t.due({KEY: status()}, objects, now=100.5) == []  # written, not yet seen back
    objects = {KEY: obj(as_entry(status()), others=1)}
    assert t.due({KEY: status(injections=3)}, objects, now=102.0) == []  # counters: wait
    assert [w.entry["injections"] for w in t.due({KEY: status(injections=3)}, objects, now=105.0)] == [3]
    [w] = t.due({KEY: status(injections=3, reason="Overridden", active=False)}, objects, now=102.0)
    assert w.entry is not None and w.entry["active"] is False  # state: at once


def test_nothing_is_written_when_the_object_already_says_it() -> None:
    t = StatusThrottle("a", interval=5.0)
    objects = {KEY: obj(as_entry(status(injections=2)))}
    assert t.due({KEY: status(injections=2)}, objects, now=0.0) == []
    assert t.due({KEY: None}, {KEY: obj()}, now=0.0) == []  # no entry wanted, none there


def test_an_entry_no_longer_wanted_is_removed_and_a_vanished_object_forgotten() -> None:
    t = StatusThrottle("a", interval=5.0)
    [w] = t.due({KEY: None}, {KEY: obj(as_entry(status()))}, now=0.0)
    assert w == Write(KEY, "u1", None)
    t.wrote(w, 0.0)
    assert t.due({KEY: status()}, {}, now=1.0) == []
    assert t.due({KEY: status()}, {KEY: obj(uid="u2")}, now=1.0) == [Write(KEY, "u2", as_entry(status()))]
