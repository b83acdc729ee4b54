"""FaultProfile and FaultActivation objects: what their spec and status hold, and how an object
becomes a profile through the same loader as a file (so it is refused for the same reasons)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kube_fault_proxy.proxy.crd import API_VERSION
from kube_fault_proxy.proxy.profiles.loader import problem_from, validate
from kube_fault_proxy.proxy.profiles.problems import MAX_REPORTED, ProfileError
from kube_fault_proxy.proxy.profiles.profile import API_VERSION as FILE_API_VERSION
from kube_fault_proxy.proxy.profiles.profile import KIND as PROFILE_KIND
from kube_fault_proxy.proxy.profiles.profile import NAME_PATTERN, FaultProfile
from kube_fault_proxy.proxy.schema.strict import StrictModel

Obj = dict[str, Any]
ACTIVATION_KIND = "FaultActivation"
# A profile file's metadata.description and .incident live in these annotations on an object:
# Kubernetes' ObjectMeta has no room for them.
DESCRIPTION = "kube-fault-proxy.io/description"
INCIDENT = "kube-fault-proxy.io/incident"
# Every proxy carries this label with its own name, so a selector can name one proxy.
PROXY_LABEL = "kube-fault-proxy.io/proxy"

LABEL_KEY = (r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
             r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
LabelKey = Annotated[str, Field(pattern=LABEL_KEY, max_length=317)]
LabelValue = Annotated[str, Field(pattern=LABEL_VALUE, max_length=63)]
MAX_TTL_SECONDS = 7 * 24 * 3600


class ActivationSpec(StrictModel):
    """Which profile to activate on which proxies, with an optional seed and time to live."""

    profile: Annotated[str, Field(pattern=NAME_PATTERN, max_length=63)] = Field(
        description="a FaultProfile in the same namespace")
    seed: Annotated[int, Field(ge=0, lt=2**63)] | None = Field(
        None, description="default: the profile's seed, else one derived from this object's uid (the same on "
                          "every proxy and after a restart)")
    ttlSeconds: Annotated[int, Field(ge=1, le=MAX_TTL_SECONDS)] | None = Field(
        None, description="the activation ends this long after the object was created, on every proxy")
    proxySelector: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, description="labels of the proxies it applies to (all must match); empty: every "
                                          f"proxy. Each proxy has {PROXY_LABEL}=<its name>.")


class Condition(BaseModel):
    """metav1.Condition: whether a proxy applied the activation, and why not."""

    model_config = ConfigDict(extra="forbid")
    type: Annotated[str, Field(max_length=316)] = Field(description="always Applied")
    status: Literal["True", "False", "Unknown"] = Field(description="True: the proxy runs this activation")
    reason: Annotated[str, Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", max_length=1024)] = Field(
        description="Applied, or why not: InvalidActivation, Expired, Superseded, ProfileNotFound, InvalidProfile, "
                    "Overridden")
    message: Annotated[str, Field(max_length=32768)] = Field("", description="the reason in words")
    lastTransitionTime: str = Field(json_schema_extra={"format": "date-time"},
                                    description="when status or reason last changed")


class RuleCounts(BaseModel):
    """One rule's counters on one proxy: how far its trigger and limits have got there."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="the rule's name")
    matched: int = Field(0, description="requests the rule's match selected")
    eligible: int = Field(0, description="matched requests its when allowed (window, trigger, afterMatches)")
    injected: int = Field(0, description="faults it injected")
    triggerSeen: int = Field(0, description="requests its trigger's match counted")


def _map_list(key: str) -> dict[str, Any]:
    """A list merged by `key` (server-side apply): each proxy owns its own entry."""
    return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [key]}


class ProxyStatus(BaseModel):
    """What one proxy did with the activation."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="the proxy (serve --proxy-name)")
    active: bool = Field(description="whether the proxy injects this activation now")
    epoch: int | None = Field(None, description="the proxy's activation epoch (in its journal)")
    profile: str | None = Field(None, description="the FaultProfile it runs")
    profileGeneration: int | None = Field(None, description="the FaultProfile's metadata.generation it runs")
    seed: int | None = Field(None, description="the seed it runs with")
    appliedAt: str | None = Field(None, json_schema_extra={"format": "date-time"},
                                  description="when the proxy applied it")
    expiresAt: str | None = Field(None, json_schema_extra={"format": "date-time"},
                                  description="when it ends (spec.ttlSeconds after the object was created)")
    injections: int = Field(0, description="faults injected so far under this activation (updated every few seconds)")
    rules: list[RuleCounts] = Field(default_factory=list, json_schema_extra=_map_list("name"),
                                    description="each rule's counters on this proxy")
    conditions: list[Condition] = Field(default_factory=list, json_schema_extra=_map_list("type"),
                                        description="the Applied condition")


class ActivationStatus(BaseModel):
    """Each proxy writes its own entry (server-side apply, one field manager per proxy)."""

    model_config = ConfigDict(extra="forbid")
    proxies: list[ProxyStatus] = Field(default_factory=list, json_schema_extra=_map_list("name"),
                                       description="one entry per proxy, written by that proxy")


def ref(obj: Obj) -> str:
    """namespace/name of an object."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def profile_from_object(obj: Obj) -> FaultProfile:
    """A FaultProfile object as a profile, through the loader's one path; raises ProfileError."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    file_meta: Obj = {"name": meta.get("name")}
    for field, annotation in (("description", DESCRIPTION), ("incident", INCIDENT)):
        if annotation in annotations:
            file_meta[field] = annotations[annotation]
    data = {"apiVersion": FILE_API_VERSION, "kind": PROFILE_KIND, "metadata": file_meta,
            "spec": obj.get("spec", {})}
    return validate(data, f"{PROFILE_KIND} {ref(obj)}")


def activation_from_object(obj: Obj) -> ActivationSpec:
    """A FaultActivation's spec, strictly validated; raises ProfileError."""
    source = f"{ACTIVATION_KIND} {ref(obj)}"
    try:
        return ActivationSpec.model_validate(obj.get("spec"))
    except ValidationError as e:
        errors = e.errors(include_url=False, include_input=False)
        problems = [problem_from({**err, "loc": ("spec", *err["loc"])}, None, source) for err in errors]
        raise ProfileError(problems[:MAX_REPORTED], omitted=max(0, len(problems) - MAX_REPORTED)) from None


def profile_to_object(profile: FaultProfile, namespace: str | None = None) -> Obj:
    """A profile as a FaultProfile object to apply (description and incident as annotations)."""
    meta: Obj = {"name": profile.name}
    if namespace:
        meta["namespace"] = namespace
    annotations = {key: value for key, value in ((DESCRIPTION, profile.metadata.description),
                                                 (INCIDENT, profile.metadata.incident)) if value}
    if annotations:
        meta["annotations"] = annotations
    spec = profile.spec.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)
    return {"apiVersion": API_VERSION, "kind": PROFILE_KIND, "metadata": meta, "spec": spec}


__all__ = ["ACTIVATION_KIND", "DESCRIPTION", "INCIDENT", "PROXY_LABEL", "ActivationSpec", "ActivationStatus",
           "Condition", "Obj", "ProxyStatus", "RuleCounts", "activation_from_object", "profile_from_object",
           "profile_to_object", "ref"]
