"""The FaultProfile schema: selectors, timing (`when`), rules and the profile envelope."""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import Field, model_validator

from kube_fault_proxy.proxy.faults import Fault
from kube_fault_proxy.proxy.faults.base import INT64_MAX
from kube_fault_proxy.proxy.schema.strict import NON_ZERO_DURATION, Duration, StrictModel

API_VERSION = "kube-fault-proxy/v1"
KIND = "FaultProfile"
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$"
Verb = Literal[
    "get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "proxy",
    "post", "put", "head", "options",
]  # fmt: skip
Glob = Annotated[str, Field(max_length=253)]
GlobList = Annotated[list[Glob], Field(min_length=1)]


class Selector(StrictModel):
    """Which requests a rule or trigger sees; an unset field matches anything, a list is any-of."""

    verbs: Annotated[list[Verb], Field(min_length=1)] | None = Field(
        None, description="Kubernetes verbs (get, list, watch, create, …); post, put, … for non-resource URLs")
    groups: GlobList | None = Field(None, description='API groups; "" or "core" is the core group')
    versions: GlobList | None = Field(None, description="API versions, e.g. v1")
    resources: GlobList | None = Field(None, description="resources, e.g. pods, nodes")
    subresources: GlobList | None = Field(None, description='"" matches "no subresource"')
    namespaces: GlobList | None = Field(None, description="namespace globs")
    names: GlobList | None = Field(None, description="object name globs")
    userAgents: GlobList | None = Field(None, description="User-Agent globs, e.g. yunikorn*")
    targetNodes: GlobList | None = Field(None, description="Binding target node (pods/binding)")
    paths: GlobList | None = Field(None, description="URL path globs, e.g. for /healthz")


class Trigger(StrictModel):
    """Arms a rule once `count` requests matching `match` have been seen since activation."""

    match: Selector = Field(description="the requests counted")
    count: Annotated[int, Field(ge=1, le=INT64_MAX)] = Field(
        description="armed from this matching request on (it included)")
    answered: bool = Field(
        False, description="count only matching requests the apiserver answered with a 2xx (e.g. bind "
                           "successes), not requests as they arrive")


class When(StrictModel):
    """When a matching request is eligible for injection; every field is optional and composes."""

    after: Duration | None = Field(None, description="eligible only this long after activation")
    for_: Duration | None = Field(None, alias="for", description="window length from `after`",
                                  json_schema_extra=NON_ZERO_DURATION)
    afterMatches: Annotated[int, Field(ge=0, le=INT64_MAX)] | None = Field(
        None, description="let the first N matching requests pass"
    )
    every: Annotated[int, Field(ge=1, le=INT64_MAX)] | None = Field(None, description="every Nth eligible match")
    maxInjections: Annotated[int, Field(ge=1, le=INT64_MAX)] | None = Field(
        None, description="at most N injections by this rule")
    perObjectMax: Annotated[int, Field(ge=1, le=INT64_MAX)] | None = Field(
        None, description="at most K injections per object (namespace/name)"
    )
    trigger: Trigger | None = Field(None, description="eligible only once another selector has counted N requests")

    @model_validator(mode="after")
    def _positive_window(self) -> Self:
        if self.after is not None and self.after < 0:
            raise ValueError("after must not be negative")
        if self.for_ is not None and self.for_ <= 0:
            raise ValueError("for must be longer than zero")
        return self


class Rule(StrictModel):
    """A named selector, an optional probability and timing, and exactly one fault."""

    name: Annotated[str, Field(pattern=NAME_PATTERN)] = Field(description="unique in the profile; journaled")
    match: Selector = Field(Selector(), description="which requests the rule sees (unset: every request)")
    probability: Annotated[float, Field(ge=0.0, le=1.0)] = Field(
        1.0, description="chance per eligible match, drawn from the rule's own stream seeded by (seed, rule name)")
    when: When = Field(When(), description="when a matching request is eligible (unset: always)")
    fault: Fault = Field(description="exactly one fault kind")


class Metadata(StrictModel):
    """Name and the human story of the profile: what it simulates, which incident it stands for."""

    name: Annotated[str, Field(pattern=NAME_PATTERN)] = Field(
        description="lowercase DNS-style name, unique in a library")
    description: Annotated[str, Field(max_length=4096)] = Field("", description="what it simulates")
    incident: Annotated[str, Field(max_length=1024)] = Field("", description="the real incident it stands for")


class Spec(StrictModel):
    """A seed for every probabilistic choice, and the rules, checked in order."""

    seed: Annotated[int, Field(ge=0, lt=2**63)] | None = Field(
        None, description="seeds every rule's stream; an activation may override it; unset: random, journaled")
    # A map keyed by name for Kubernetes: the apiserver refuses two rules with one name, as the loader does.
    rules: Annotated[list[Rule], Field(max_length=256)] = Field(
        default_factory=list, description="checked in order; the first rule that injects wins",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]})

    @model_validator(mode="after")
    def _unique_rule_names(self) -> Self:
        seen: set[str] = set()
        for rule in self.rules:
            if rule.name in seen:
                raise ValueError(f"rule name {rule.name!r} is used twice")
            seen.add(rule.name)
        return self


class FaultProfile(StrictModel):
    """apiVersion kube-fault-proxy/v1, kind FaultProfile."""

    apiVersion: Literal["kube-fault-proxy/v1"] = Field(description="always kube-fault-proxy/v1")
    kind: Literal["FaultProfile"] = Field(description="always FaultProfile")
    metadata: Metadata = Field(description="name, description and incident")
    spec: Spec = Field(description="seed and rules")

    @property
    def name(self) -> str:
        """The profile's metadata.name."""
        return self.metadata.name
