"""expire: answer a watch with the 410 Expired ERROR event, as the apiserver does, forcing a relist."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from kube_fault_proxy.proxy.faults.base import Draw, FaultSpec
from kube_fault_proxy.proxy.faults.plan import Plan, Respond
from kube_fault_proxy.proxy.faults.traits import Traits
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.requests.status import JSON, Reply, status_reply, watch_error_event


def expired_message(ident: RequestIdentity) -> str:
    """The watch cache's wording: too old resource version: <asked> (<oldest kept - 1>)."""
    rv = ident.resource_version or "0"
    return f"too old resource version: {rv} ({int(rv) + 1 if rv.isdigit() else 1})"


class Expire(FaultSpec):
    """Upstream never sees the watch; the client gets 200 + one ERROR event (or HTTP 410)."""

    kind: ClassVar[str] = "expire"
    traits: ClassVar[Traits] = Traits(acts_on="watch", watch_requests="resumed")
    search_group: ClassVar[str] = "watch"
    form: Literal["auto", "event", "status"] = Field(
        "auto", description="auto: the ERROR event for JSON watches, HTTP 410 for protobuf ones")
    onlyRewatch: bool = Field(False, description="only watches that resume from a resourceVersion")
    resourceVersion: str | None = Field(None, description="only watches resuming from exactly this one")
    failRelist: bool = Field(False, description="also answer the client's next relist of it (a LIST, or a "
                                                "watch with sendInitialEvents) with 410")

    @classmethod
    def draw(cls, rng: random.Random, where: Draw) -> dict[str, Any]:
        choice: dict[str, Any] = rng.choice([{}, {"onlyRewatch": True}, {"failRelist": True}])
        return choice

    @classmethod
    def companion(cls, rng: random.Random) -> dict[str, Any]:
        """The resumed watch answered 410: its client relists."""
        return {"onlyRewatch": True}

    @classmethod
    def relists(cls, settings: Mapping[str, Any]) -> bool:
        return True

    def applies_to(self, ident: RequestIdentity) -> bool:
        if not ident.watch or ident.initial_events:
            return False
        if self.onlyRewatch and ident.resource_version in (None, "", "0"):
            return False
        return self.resourceVersion is None or ident.resource_version == self.resourceVersion

    @property
    def follows_up_relist(self) -> bool:
        return self.failRelist

    def relist_plan(self, relist: RequestIdentity) -> Plan:
        return Plan(before=(Respond(status_reply(410, relist, "Expired", expired_message(relist))),))

    def plan(self, ident: RequestIdentity, rng: random.Random) -> Plan:
        message = expired_message(ident)
        form = self.form
        if form == "auto":
            form = "status" if "protobuf" in ident.accept else "event"
        if form == "status":
            return Plan(before=(Respond(status_reply(410, ident, "Expired", message)),))
        body = watch_error_event(410, "Expired", message)
        reply = Reply(200, body, (("Content-Type", JSON), ("Cache-Control", "no-cache, private")))
        return Plan(before=(Respond(reply),))
