"""Fault kinds: one module each, gathered into the `Fault` one-of a rule carries."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from pydantic import ConfigDict, create_model, model_validator

from kube_fault_proxy.proxy.faults.abort import Abort
from kube_fault_proxy.proxy.faults.base import FaultSpec
from kube_fault_proxy.proxy.faults.coalesce_events import CoalesceEvents
from kube_fault_proxy.proxy.faults.commit_then_fail import CommitThenFail
from kube_fault_proxy.proxy.faults.crash_point import CrashPoint
from kube_fault_proxy.proxy.faults.cut import Cut
from kube_fault_proxy.proxy.faults.delay import Delay
from kube_fault_proxy.proxy.faults.delay_events import DelayEvents
from kube_fault_proxy.proxy.faults.drop_events import DropEvents
from kube_fault_proxy.proxy.faults.duplicate_events import DuplicateEvents
from kube_fault_proxy.proxy.faults.expire import Expire
from kube_fault_proxy.proxy.faults.fail_then_commit import FailThenCommit
from kube_fault_proxy.proxy.faults.hang import Hang
from kube_fault_proxy.proxy.faults.hold_events import HoldEvents
from kube_fault_proxy.proxy.faults.outage import Outage
from kube_fault_proxy.proxy.faults.reset import Reset
from kube_fault_proxy.proxy.faults.reset_upstream import ResetUpstream
from kube_fault_proxy.proxy.faults.stale_list import StaleList
from kube_fault_proxy.proxy.faults.stall_connection import StallConnection
from kube_fault_proxy.proxy.faults.stall_stream import StallStream
from kube_fault_proxy.proxy.faults.throttle import Throttle
from kube_fault_proxy.proxy.faults.two_views import TwoViews
from kube_fault_proxy.proxy.faults.watch_list import WatchList
from kube_fault_proxy.proxy.schema.strict import StrictModel, exactly_one_of

# In the order of their search groups (FaultSpec.search_group): the fault search draws kinds in this order, so
# a kind added at the end of its group leaves a seeded search's earlier draws as they were.
KINDS: tuple[type[FaultSpec], ...] = (
    Abort, Throttle, Delay, Hang, Reset, CommitThenFail,  # requests
    Expire, Cut, DropEvents, DuplicateEvents,  # watches
    Outage, ResetUpstream,  # connections
    StaleList, CoalesceEvents, CrashPoint, DelayEvents, FailThenCommit, HoldEvents,  # views
    TwoViews,  # views, added after the rest: a seeded search keeps its earlier draws
    WatchList,  # watches, searched only when named: at the end, so the earlier draws stay as they were
    StallStream, StallConnection,  # silent watches and connections (searched only when named)
)


class FaultBase(StrictModel):
    """Exactly one fault kind per rule, named by its key: its fields are the kinds of KINDS (see `Fault`)."""

    model_config = ConfigDict(json_schema_extra=exactly_one_of(*(k.kind for k in KINDS)))

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        chosen = [k.kind for k in KINDS if getattr(self, k.kind) is not None]
        if len(chosen) != 1:
            names = ", ".join(k.kind for k in KINDS)
            got = f" (got {', '.join(chosen)})" if chosen else ""
            raise ValueError(f"a fault needs exactly one kind of: {names}{got}")
        return self

    @property
    def spec(self) -> FaultSpec:
        """The one kind that is set."""
        for k in KINDS:
            value = getattr(self, k.kind)
            if value is not None:
                return value  # type: ignore[no-any-return]
        raise AssertionError("validated Fault has no kind")


def _fault_model() -> type[FaultBase]:
    """The `Fault` one-of, a field per kind of KINDS in its order: a kind is added in one place, KINDS."""
    fields: dict[str, Any] = {k.kind: (k | None, None) for k in KINDS}
    return create_model("Fault", __base__=FaultBase, __module__=__name__,
                        __doc__="Exactly one fault kind per rule, named by its key.", **fields)


if TYPE_CHECKING:
    Fault = FaultBase
else:
    Fault = _fault_model()


__all__ = ["KINDS", "Fault", "FaultBase", "FaultSpec"]
