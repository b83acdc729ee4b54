"""From the FaultProfile and FaultActivation objects a proxy has seen to its active profile and its
entry in each activation's status: a state machine with no I/O, run on the proxy's loop.

Profiles go into the runtime's library like files and uploads do (source `cluster NS/NAME`; an
object shadows a file profile of the same name while it exists). Of the activations that select
this proxy and have not expired, the most recently created one applies, through the same
`Runtime.activate` as the HTTP API; the control plane may switch after it, and the last change wins
until the activation or its profile changes again. A switch that cannot be made (a missing or
invalid profile) keeps what was active, and says why in the status.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from kube_fault_proxy.proxy.crd.objects import (
    PROXY_LABEL,
    ActivationSpec,
    Condition,
    Obj,
    ProxyStatus,
    RuleCounts,
    activation_from_object,
    profile_from_object,
    ref,
)
from kube_fault_proxy.proxy.engine import Engine
from kube_fault_proxy.proxy.profiles.library import Entry
from kube_fault_proxy.proxy.profiles.problems import ProfileError
from kube_fault_proxy.proxy.profiles.profile import FaultProfile
from kube_fault_proxy.proxy.runtime import Runtime

Status = Literal["True", "False", "Unknown"]
Key = tuple[str, str]  # (namespace, name), as the informers key their stores
APPLIED = "Applied"
SOURCE_PREFIX = "cluster "


@dataclass(frozen=True, slots=True)
class ProxyIdentity:
    """This proxy's name and labels, as activations select them."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)

    def selected_by(self, selector: Mapping[str, str]) -> bool:
        """Whether every label of the selector matches (an empty selector matches every proxy)."""
        mine = {**self.labels, PROXY_LABEL: self.name}
        return all(mine.get(k) == v for k, v in selector.items())


def rfc3339(t: float) -> str:
    """Seconds since the epoch as Kubernetes writes times."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> float:
    """A Kubernetes timestamp as seconds since the epoch (0 when absent)."""
    return datetime.fromisoformat(text).timestamp() if text else 0.0


def uid_seed(uid: str) -> int:
    """A seed from an object's uid: the same on every proxy, and after a restart."""
    return int.from_bytes(hashlib.sha256(uid.encode()).digest()[:8], "big") >> 1


@dataclass(frozen=True, slots=True)
class Loaded:
    """One FaultProfile object as the loader read it: a profile, or why not."""

    uid: str
    resource_version: str
    generation: int
    profile: FaultProfile | None
    error: ProfileError | None


@dataclass(frozen=True, slots=True)
class View:
    """One FaultActivation as this proxy sees it at one instant."""

    key: Key
    uid: str
    generation: int
    created: float
    spec: ActivationSpec | None
    error: ProfileError | None
    selected: bool
    deadline: float | None

    def live(self, now: float) -> bool:
        """Valid, selecting this proxy and not expired: a candidate to apply."""
        return self.spec is not None and self.selected and (self.deadline is None or now < self.deadline)


@dataclass(frozen=True, slots=True)
class Applied:
    """What this proxy last activated from the cluster."""

    key: Key
    uid: str
    generation: int
    profile: FaultProfile
    profile_generation: int
    engine: Engine
    seed: int
    at: float
    deadline: float | None

    def target(self) -> tuple[str, int, FaultProfile]:
        """What re-applying is compared on: the activation's spec and the profile's content."""
        return self.uid, self.generation, self.profile


class Reconciler:
    """Feeds the library and switches the runtime from the objects; returns each status entry."""

    def __init__(self, runtime: Runtime, identity: ProxyIdentity, wall: Callable[[], float]) -> None:
        self.runtime = runtime
        self.identity = identity
        self.wall = wall
        self.applied: Applied | None = None
        self._loaded: dict[str, Loaded] = {}  # profile name -> what its object loaded as
        self._displaced: dict[str, Entry] = {}  # library entries our objects shadow
        self._specs: dict[tuple[str, int], ActivationSpec | ProfileError] = {}
        self._transitions: dict[Key, tuple[Status, str, float]] = {}  # status, reason, since

    # --- profiles ---------------------------------------------------------------------

    def _sync_profiles(self, profiles: Mapping[Key, Obj]) -> None:
        seen: set[str] = set()
        for obj in profiles.values():
            meta = obj["metadata"]
            name, uid, rv = meta["name"], meta.get("uid", ""), meta.get("resourceVersion", "")
            seen.add(name)
            old = self._loaded.get(name)
            if old is not None and (old.uid, old.resource_version) == (uid, rv):
                continue
            try:
                profile: FaultProfile | None = profile_from_object(obj)
                error = None
            except ProfileError as e:
                profile, error = None, e
                self.runtime.counters.note("cluster-profile-invalid", object=ref(obj), resourceVersion=rv,
                                  problems=[str(p) for p in e.problems])
            self._loaded[name] = Loaded(uid, rv, int(meta.get("generation", 0)), profile, error)
            if profile is not None:
                self._put(profile, ref(obj))
        for name in list(self._loaded):
            if name not in seen:
                del self._loaded[name]
                self._remove(name)

    def _put(self, profile: FaultProfile, where: str) -> None:
        library = self.runtime.library
        entry = library.get(profile.name)
        source = SOURCE_PREFIX + where
        if entry is not None and entry.profile == profile and entry.source == source:
            return
        if entry is not None and not entry.source.startswith(SOURCE_PREFIX):
            self._displaced.setdefault(profile.name, entry)
        library.put(profile, source)

    def _remove(self, name: str) -> None:
        library = self.runtime.library
        entry = library.get(name)
        if entry is None or not entry.source.startswith(SOURCE_PREFIX):
            self._displaced.pop(name, None)  # replaced through the API meanwhile: leave it
            return
        displaced = self._displaced.pop(name, None)
        if displaced is not None:
            library.put(displaced.profile, displaced.source)
        else:
            library.delete(name)

    # --- activations ------------------------------------------------------------------

    def _spec(self, obj: Obj) -> ActivationSpec | ProfileError:
        meta = obj["metadata"]
        cache_key = (meta.get("uid", ""), int(meta.get("generation", 0)))
        if cache_key not in self._specs:
            try:
                self._specs[cache_key] = activation_from_object(obj)
            except ProfileError as e:
                self._specs[cache_key] = e
                self.runtime.counters.note("cluster-activation-invalid", object=ref(obj),
                                  problems=[str(p) for p in e.problems])
        return self._specs[cache_key]

    def _view(self, key: Key, obj: Obj) -> View:
        meta = obj["metadata"]
        parsed = self._spec(obj)
        created = parse_time(meta.get("creationTimestamp"))
        if isinstance(parsed, ProfileError):
            return View(key, meta.get("uid", ""), int(meta.get("generation", 0)), created, None, parsed,
                        True, None)
        deadline = None if parsed.ttlSeconds is None else created + parsed.ttlSeconds
        return View(key, meta.get("uid", ""), int(meta.get("generation", 0)), created, parsed, None,
                    self.identity.selected_by(parsed.proxySelector), deadline)

    def _is_running(self, applied: Applied | None) -> bool:
        active = self.runtime.activations.active
        return applied is not None and active is not None and active.engine is applied.engine

    def _switch(self, winner: View | None, live: set[Key], now: float) -> None:
        applied = self.applied
        profile = self._loaded.get(winner.spec.profile) if winner is not None and winner.spec else None
        if winner is not None and winner.spec is not None and profile is not None and profile.profile:
            target = (winner.uid, winner.generation, profile.profile)
            if applied is not None and applied.target() == target:
                return  # already applied; if the control plane switched since, its change stands
            self._activate(winner, winner.spec, profile, now)
            return
        if applied is not None and applied.key not in live and self._is_running(applied):
            self.runtime.activations.deactivate("cluster", activation=f"{applied.key[0]}/{applied.key[1]}")
        if applied is not None and applied.key not in live:
            self.applied = None

    def _activate(self, view: View, spec: ActivationSpec, loaded: Loaded, now: float) -> None:
        profile = loaded.profile
        assert profile is not None
        self._put(profile, f"{view.key[0]}/{profile.name}")  # the cluster's version, whatever was uploaded since
        seed = spec.seed if spec.seed is not None else profile.spec.seed
        seed = seed if seed is not None else uid_seed(view.uid)
        ttl = None if view.deadline is None else max(view.deadline - now, 0.001)
        activation = self.runtime.activations.activate(
            profile.name, seed, ttl, source="cluster", activation=f"{view.key[0]}/{view.key[1]}",
            generation=view.generation, profileGeneration=loaded.generation)
        self.applied = Applied(view.key, view.uid, view.generation, profile, loaded.generation,
                               activation.engine, seed, now, view.deadline)

    # --- status -----------------------------------------------------------------------

    def _condition(self, view: View, winner: View | None, now: float) -> tuple[Status, str, str]:
        """(status, reason, message) of the Applied condition for one activation."""
        applied = self.applied if self.applied is not None and self.applied.uid == view.uid else None
        running = self._is_running(applied)
        still = (f"; the version that loaded last (epoch {applied.engine.epoch}) stays active"
                 if running and applied is not None else "")
        if view.error is not None:
            return "False", "InvalidActivation", str(view.error)
        if view.deadline is not None and now >= view.deadline:
            return "False", "Expired", f"its time to live ended at {rfc3339(view.deadline)}"
        if winner is None or winner.key != view.key:
            other = f"{winner.key[0]}/{winner.key[1]}" if winner is not None else "another activation"
            return "False", "Superseded", f"FaultActivation {other}, created later, applies to this proxy"
        assert view.spec is not None
        loaded = self._loaded.get(view.spec.profile)
        if loaded is None:
            return "False", "ProfileNotFound", f"no FaultProfile {view.key[0]}/{view.spec.profile}{still}"
        if loaded.profile is None:
            return "False", "InvalidProfile", f"{loaded.error}{still}"
        if running:
            return "True", APPLIED, f"active as epoch {applied.engine.epoch if applied else '?'}"
        return "False", "Overridden", self._overridden()

    def _overridden(self) -> str:
        active = self.runtime.activations.active
        now_running = (f"profile {active.engine.profile.name} (epoch {active.engine.epoch})" if active
                       else "pass-through")
        return f"the proxy's control plane switched to {now_running} after this activation applied"

    def _status(self, view: View, winner: View | None, now: float) -> ProxyStatus:
        status, reason, message = self._condition(view, winner, now)
        old = self._transitions.get(view.key)
        since = old[2] if old is not None and old[:2] == (status, reason) else now
        self._transitions[view.key] = (status, reason, since)
        condition = Condition(type=APPLIED, status=status, reason=reason, message=message[:32768],
                              lastTransitionTime=rfc3339(since))
        applied = self.applied if self.applied is not None and self.applied.uid == view.uid else None
        if applied is None:
            return ProxyStatus(name=self.identity.name, active=False, conditions=[condition])
        counts = applied.engine.counters()
        return ProxyStatus(
            name=self.identity.name, active=self._is_running(applied), epoch=applied.engine.epoch,
            profile=applied.profile.name, profileGeneration=applied.profile_generation, seed=applied.seed,
            appliedAt=rfc3339(applied.at), expiresAt=rfc3339(applied.deadline) if applied.deadline else None,
            injections=sum(c["injected"] for c in counts.values()),
            rules=[RuleCounts(name=name, **c) for name, c in counts.items()], conditions=[condition])

    # --- the whole step ---------------------------------------------------------------

    def sync(self, profiles: Mapping[Key, Obj], activations: Mapping[Key, Obj]) -> dict[Key, ProxyStatus | None]:
        """Bring the library and the runtime in line with the objects; this proxy's status entry for
        each activation (None: the activation does not select it, so it has no entry)."""
        now = self.wall()
        self._sync_profiles(profiles)
        views = {key: self._view(key, obj) for key, obj in activations.items()}
        live = {key for key, v in views.items() if v.live(now)}
        winner = max((views[k] for k in live), key=lambda v: (v.created, v.key[1]), default=None)
        self._switch(winner, live, now)
        for key in list(self._transitions):
            if key not in views or not views[key].selected:
                del self._transitions[key]
        live_uids = {(v.uid, v.generation) for v in views.values()}
        self._specs = {k: s for k, s in self._specs.items() if k in live_uids}
        return {key: self._status(v, winner, now) if v.selected else None for key, v in views.items()}

    def describe(self) -> dict[str, Any]:
        """What the control plane shows: the applied activation and the profiles loaded."""
        applied = self.applied
        return {
            "applied": None if applied is None else {
                "activation": f"{applied.key[0]}/{applied.key[1]}", "generation": applied.generation,
                "profile": applied.profile.name, "profileGeneration": applied.profile_generation,
                "epoch": applied.engine.epoch, "active": self._is_running(applied)},
            "profiles": {name: "ok" if lo.profile is not None else "invalid"
                         for name, lo in sorted(self._loaded.items())},
        }
