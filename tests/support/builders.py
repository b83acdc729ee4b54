"""Small builders shared by the unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from kube_fault_proxy.proxy.profiles.loader import validate
from kube_fault_proxy.proxy.profiles.profile import FaultProfile
from kube_fault_proxy.proxy.requests.identity import RequestIdentity, parse

BIND_MATCH = {"verbs": ["create"], "resources": ["pods"], "subresources": ["binding"]}


def profile(*rules: dict[str, Any], name: str = "test", seed: int | None = None) -> FaultProfile:
    """A profile from rule dicts."""
    spec: dict[str, Any] = {"rules": list(rules)}
    if seed is not None:
        spec["seed"] = seed
    doc = {"apiVersion": "kube-fault-proxy/v1", "kind": "FaultProfile",
           "metadata": {"name": name}, "spec": spec}
    return validate(doc, "<test>")


def bind(pod: str, node: str = "n1", ns: str = "default") -> RequestIdentity:
    """A Binding POST for a pod."""
    body = (f'{{"target":{{"kind":"Node","name":"{node}"}}}}').encode()
    return parse("POST", f"/api/v1/namespaces/{ns}/pods/{pod}/binding", body=body,
                 content_type="application/json")


def get_pod(pod: str, ns: str = "default") -> RequestIdentity:
    """A GET of one pod."""
    return parse("GET", f"/api/v1/namespaces/{ns}/pods/{pod}")


def watch_pods() -> RequestIdentity:
    """A cluster-wide pods watch."""
    return parse("GET", "/api/v1/pods", "watch=1")


class Listing:
    """What lightkube's asyncio list returns: the objects (async) and the list's resourceVersion."""

    def __init__(self, objs: list[dict[str, Any]], rv: str) -> None:
        self.objs, self.resourceVersion = objs, rv

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        for obj in self.objs:
            yield obj
