"""The cluster source's state machine: objects in, the active profile and status entries out; no I/O."""

from __future__ import annotations

from typing import Any

import pytest
from kube_fault_proxy.proxy.crd import API_VERSION
from kube_fault_proxy.proxy.crd.reconciler import Key, ProxyIdentity, Reconciler, rfc3339, uid_seed
from kube_fault_proxy.proxy.journal import Journal
from kube_fault_proxy.proxy.profiles.library import Entry, Library
from kube_fault_proxy.proxy.runtime import Runtime

from tests.support.builders import BIND_MATCH, bind, profile

T0 = 1_800_000_000.0
FAIL_BINDS = [{"name": "fail-binds", "match": BIND_MATCH, "fault": {"abort": {"status": 500}}}]


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class World:
    """A runtime, a reconciler for proxy `a`, and the two stores the informers would hold."""

    def __init__(self, name: str = "a", labels: dict[str, str] | None = None) -> None:
        self.wall = Clock()
        self.runtime = Runtime(Library({"file-profile": Entry(profile(name="file-profile"), "fault_profiles/f.yaml")}),
                               Journal(None, self.wall), self.wall, self.wall)
        self.reconciler = Reconciler(self.runtime, ProxyIdentity(name, labels or {}), self.wall)
        self.profiles: dict[Key, dict[str, Any]] = {}
        self.activations: dict[Key, dict[str, Any]] = {}
        self._rv = 100

    def _meta(self, name: str, generation: int, created: float) -> dict[str, Any]:
        self._rv += 1
        return {"name": name, "namespace": "ns", "uid": f"uid-{name}-{created}", "generation": generation,
                "resourceVersion": str(self._rv), "creationTimestamp": rfc3339(created)}

    def profile(self, name: str, rules: list[dict[str, Any]], generation: int = 1, **spec: Any) -> None:
        self.profiles[("ns", name)] = {"apiVersion": API_VERSION, "kind": "FaultProfile",
                                       "metadata": self._meta(name, generation, T0 - 100),
                                       "spec": {"rules": rules, **spec}}

    def activation(self, name: str, generation: int = 1, created: float = T0, **spec: Any) -> None:
        old = self.activations.get(("ns", name))
        meta = self._meta(name, generation, created)
        if old is not None:
            meta["uid"] = old["metadata"]["uid"]
        self.activations[("ns", name)] = {"apiVersion": API_VERSION, "kind": "FaultActivation", "metadata": meta,
                                          "spec": spec}

    def sync(self) -> dict[Key, Any]:
        return self.reconciler.sync(self.profiles, self.activations)

    def active(self) -> tuple[str, int] | None:
        a = self.runtime.activations.active
        return None if a is None else (a.engine.profile.name, a.engine.epoch)

    def condition(self, name: str) -> tuple[str, str, str]:
        status = self.sync()[("ns", name)]
        c = status.conditions[0]
        return c.status, c.reason, c.message

    def journal(self, event: str) -> list[dict[str, Any]]:
        return [r for r in self.runtime.journal.since(0) if r["event"] == event]


def test_an_activation_applies_its_profile_and_reports_it() -> None:
    w = World()
    w.profile("fail", FAIL_BINDS)
    w.activation("act", profile="fail")
    status = w.sync()[("ns", "act")]
    assert w.active() == ("fail", 1)
    assert w.runtime.decide(bind("p")) is not None
    assert (status.name, status.active, status.epoch, status.profile, status.profileGeneration) == ("a", True, 1,
                                                                                                   "fail", 1)
    assert status.seed == uid_seed(w.activations[("ns", "act")]["metadata"]["uid"])
    assert (status.conditions[0].status, status.conditions[0].reason) == ("True", "Applied")
    assert w.runtime.library.get("fail") == Entry(w.runtime.library.get("fail").profile, "cluster ns/fail")  # type: ignore[union-attr]
    [record] = w.journal("activate")
    assert (record["source"], record["activation"], record["generation"]) == ("cluster", "ns/act", 1)


def test_nothing_changes_while_nothing_changes() -> None:
    w = World()
    w.profile("fail", FAIL_BINDS)
    w.activation("act", profile="fail")
    first = w.sync()
    w.runtime.counters.performed(w.runtime.decide(bind("p")), bind("p"))  # type: ignore[arg-type]
    again = w.sync()
    assert w.active() == ("fail", 1)
    assert again[("ns", "act")].injections == 1 and first[("ns", "act")].injections == 0
    assert again[("ns", "act")].conditions == first[("ns", "act")].conditions


def test_a_spec_change_reapplies_with_a_new_epoch() -> None:
    w = World()
    w.profile("fail", FAIL_BINDS)
    w.activation("act", profile="fail")
    w.sync()
    w.activation("act", generation=2, profile="fail", seed=42)
    status = w.sync()[("ns", "act")]
    assert w.active() == ("fail", 2)
    assert (status.epoch, status.seed) == (2, 42)


def test_a_change_of_profile_content_reapplies_and_a_no_op_update_does_not() -> None:
    w = World()
    w.profile("fail", FAIL_BINDS)
    w.activation("act", profile="fail")
    w.sync()
    w.profiles[("ns", "fail")]["metadata"]["annotations"] = {"kube-fault-proxy.io/incident": "X-1"}
    w.profiles[("ns", "fail")]["metadata"]["resourceVersion"] = "900"
    w.sync()
    assert w.active() == ("fail", 2)  # the profile's content changed (its incident)
    w.profile("fail", [{**FAIL_BINDS[0], "fault": {"abort": {"status": 503}}}], generation=2)
    w.profiles[("ns", "fail")]["metadata"]["annotations"] = {"kube-fault-proxy.io/incident": "X-1"}
    status = w.sync()[("ns", "act")]
    assert w.active() == ("fail", 3)
    assert status.profileGeneration == 2
    decision = w.runtime.decide(bind("p"))
    assert decision is not None and decision.plan.describe() == "respond 503"
    w.profiles[("ns", "fail")]["metadata"]["resourceVersion"] = "901"  # a no-op update: same content
    w.sync()
    assert w.active() == ("fail", 3)


def test_an_invalid_profile_keeps_the_old_one_and_says_why() -> None:
    w = World()
    w.profile("fail", FAIL_BINDS)
    w.activation("act", profile="fail")
    w.sync()
    w.profile("fail", [{"name": "r", "fault": {"abort": {"status": 500}}}], generation=2)
    w.profiles[("ns", "fail")]["metadata"]["annotations"] = {"kube-fault-proxy.io/description": "x" * 5000}
    status, reason, message = w.condition("act")
    assert w.active() == ("fail", 1)
    assert (status, reason) == ("False", "InvalidProfile")
    assert message == ("FaultProfile ns/fail: metadata.description: String should have at most 4096 characters; "
                       "the version that loaded last (epoch 1) stays active")
    assert w.sync()[("ns", "act")].active is True
    [record] = w.journal("cluster-profile-invalid")
    assert record["object"] == "ns/fail"
    w.sync()
    assert len(w.journal("cluster-profile-invalid")) == 1  # once per version, not per sync


def test_an_activation_of_a_missing_or_invalid_profile_switches_nothing() -> None:
    w = World()
    w.profile("fail", FAIL_BINDS)
    w.profiles[("ns", "fail")]["metadata"]["annotations"] = {"kube-fault-proxy.io/description": "x" * 5000}
    w.activation("act", profile="fail")
    w.activation("ghost", profile="nope", created=T0 + 1)
    out = w.sync()
    assert w.active() is None
    assert out[("ns", "ghost")].conditions[0].reason == "ProfileNotFound"
    assert out[("ns", "act")].conditions[0].reason == "Superseded"
    del w.activations[("ns", "ghost")]
    status, reason, message = w.condition("act")
    assert (status, reason) == ("False", "InvalidProfile") and "the version that loaded last" not in message


def test_deleting_the_activation_passes_through_and_a_relist_that_misses_it_does_too() -> None:
    for how in ("deleted", "vanished-on-relist"):
        w = World()
        w.profile("fail", FAIL_BINDS)
        w.activation("act", profile="fail")
        w.sync()
        if how == "deleted":
            del w.activations[("ns", "act")]
        else:  # what a relist after a 410 hands over: a store without it (its DELETED event was never seen)
            w.activations = {}
        assert w.sync() == {}
        assert w.active() is None
        [record] = w.journal("deactivate")
        assert (record["reason"], record["activation"]) == ("cluster", "ns/act")


def test_deleting_a_profile_restores_the_file_profile_it_shadowed() -> None:
    w = World()
    w.profile("file-profile", FAIL_BINDS)
    w.sync()
    assert w.runtime.library.get("file-profile").source == "cluster ns/file-profile"  # type: ignore[union-attr]
    del w.profiles[("ns", "file-profile")]
    w.sync()
    assert w.runtime.library.get("file-profile").source == "fault_profiles/f.yaml"  # type: ignore[union-attr]
    w.profile("gone-later", FAIL_BINDS)
    w.sync()
    del w.profiles[("ns", "gone-later")]
    w.sync()
    assert w.runtime.library.get("gone-later") is None


@pytest.mark.parametrize(("selector", "applies"), [
    ({}, True), ({"pool": "p"}, True), ({"pool": "q"}, False), ({"pool": "p", "zone": "z"}, False),
    ({"kube-fault-proxy.io/proxy": "a"}, True), ({"kube-fault-proxy.io/proxy": "b"}, False),
])
def test_the_selector_picks_proxies_by_label_and_name(selector: dict[str, str], applies: bool) -> None:
    w = World(labels={"pool": "p"})
    w.profile("fail", FAIL_BINDS)
    w.activation("act", profile="fail", proxySelector=selector)
    out = w.sync()
    assert (w.active() is not None) is applies
    assert (out[("ns", "act")] is not None) is applies


def test_a_selector_change_away_from_this_proxy_ends_it_here() -> None:
    w = World(labels={"pool": "p"})
    w.profile("fail", FAIL_BINDS)
    w.activation("act", profile="fail")
    w.sync()
    w.activation("act", generation=2, profile="fail", proxySelector={"pool": "q"})
    assert w.sync() == {("ns", "act"): None}
    assert w.active() is None


def test_the_newest_activation_wins_and_the_others_are_superseded() -> None:
    w = World()
    w.profile("fail", FAIL_BINDS)
    w.profile("other", [])
    w.activation("old", profile="fail", created=T0 - 10)
    w.activation("new", profile="other", created=T0 - 5)
    out = w.sync()
    assert w.active() == ("other", 1)
    assert out[("ns", "old")].conditions[0].message == "FaultActivation ns/new, created later, applies to this proxy"
    del w.activations[("ns", "new")]
    w.sync()
    assert w.active() == ("fail", 2)


def test_ttl_counts_from_creation_on_every_proxy_and_after_a_restart() -> None:
    w = World()
    w.profile("fail", FAIL_BINDS)
    w.activation("act", profile="fail", ttlSeconds=60, created=T0 - 20)
    status = w.sync()[("ns", "act")]
    assert w.runtime.activations.active is not None and w.runtime.activations.active.ttl_seconds == pytest.approx(40)
    assert status.expiresAt == rfc3339(T0 + 40)
    w.wall.now = T0 + 41
    w.runtime.decide(bind("p"))  # the runtime's own TTL ends it at the first request past it
    status, reason, _ = w.condition("act")
    assert w.active() is None and (status, reason) == ("False", "Expired")
    restarted = World()
    restarted.wall.now = T0 + 41
    restarted.profiles, restarted.activations = w.profiles, w.activations
    assert restarted.sync()[("ns", "act")].conditions[0].reason == "Expired"
    assert restarted.active() is None


def test_the_control_plane_wins_until_the_cluster_changes_again() -> None:
    w = World()
    w.profile("fail", FAIL_BINDS)
    w.activation("act", profile="fail")
    w.sync()
    w.runtime.activations.activate("file-profile")  # PUT /v1/active
    status, reason, message = w.condition("act")
    assert w.active() == ("file-profile", 2)
    assert (status, reason) == ("False", "Overridden")
    assert message == "the proxy's control plane switched to profile file-profile (epoch 2) after this activation applied"
    w.runtime.activations.deactivate()  # DELETE /v1/active
    w.sync()
    assert w.active() is None
    w.activation("act", generation=2, profile="fail", seed=3)
    w.sync()
    assert w.active() == ("fail", 3)
    assert [(r["event"], r.get("source") or r.get("reason")) for r in w.runtime.journal.since(0)] == [
        ("activate", "cluster"), ("deactivate", "replaced"), ("activate", "api"), ("deactivate", "api"),
        ("activate", "cluster")]


def test_a_restarted_proxy_applies_the_activation_again_with_the_same_seed() -> None:
    w = World()
    w.profile("fail", FAIL_BINDS)
    w.activation("act", profile="fail")
    before = w.sync()[("ns", "act")]
    restarted = World()
    restarted.profiles, restarted.activations = w.profiles, w.activations
    after = restarted.sync()[("ns", "act")]
    assert restarted.active() == ("fail", 1)
    assert after.seed == before.seed and after.active


def test_an_invalid_activation_is_reported_by_every_proxy() -> None:
    w = World()
    w.profile("fail", FAIL_BINDS)
    w.activation("act", profile="fail", proxySelector={"not a key!": "v"})
    status, reason, message = w.condition("act")
    assert w.active() is None
    assert (status, reason) == ("False", "InvalidActivation")
    assert message.startswith("FaultActivation ns/act: spec.proxySelector.not a key!.[key]: String should match")
    assert len(w.journal("cluster-activation-invalid")) == 1


def test_transition_times_move_only_when_the_condition_does() -> None:
    w = World()
    w.profile("fail", FAIL_BINDS)
    w.activation("act", profile="fail")
    first = w.sync()[("ns", "act")].conditions[0].lastTransitionTime
    w.wall.now += 30
    assert w.sync()[("ns", "act")].conditions[0].lastTransitionTime == first
    w.runtime.activations.deactivate()
    assert w.sync()[("ns", "act")].conditions[0].lastTransitionTime == rfc3339(T0 + 30)
