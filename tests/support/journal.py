"""Journal files as the proxy writes them, for the ledger's tests: the real Journal, the real request identity
(`RequestIdentity.as_dict`), the real plan readings (`Plan.describe`) and the real watch-event form
(`WatchEvent.as_dict`, as an editor notes it), with the stamp fields of `Decision.stamp`, on a clock the test
moves."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kube_fault_proxy.proxy.faults import KINDS
from kube_fault_proxy.proxy.journal import Journal
from kube_fault_proxy.proxy.requests.identity import parse_untrusted
from kube_fault_proxy.proxy.requests.watch import WatchEvent

RS_CONTROLLER = ("kube-controller-manager/v1.36.3 (linux/amd64) kubernetes/abcdef0/"
                 "system:serviceaccount:kube-system:replicaset-controller")
SCHEDULER = "kube-scheduler/v1.36.3 (linux/amd64) kubernetes/abcdef0/scheduler"
PROTOBUF = "application/vnd.kubernetes.protobuf"
SPECS = {k.kind: k for k in KINDS}


class JournalWriter:
    """Appends the records the proxy would write, each at `clock()`."""

    def __init__(self, path: Path, clock: Callable[[], float], profile: str = "p", epoch: int = 1) -> None:
        self.path = path
        self.journal = Journal(path, wall=clock)
        self.profile, self.epoch = profile, epoch
        self.turns: Counter[str] = Counter()

    def stamp(self, rule: str, fault: str) -> dict[str, Any]:
        """Decision.stamp() of the rule's next injection."""
        self.turns[rule] += 1
        return {"profile": self.profile, "epoch": self.epoch, "seed": 7, "rule": rule, "fault": fault,
                "match": self.turns[rule], "injection": self.turns[rule]}

    def inject(self, rule: str, fault: dict[str, Any], method: str, path: str, agent: str = RS_CONTROLLER,
               **outcome: Any) -> dict[str, Any]:
        """An `inject` record of `fault` ({kind: spec}) on this request, its action read from the fault's own plan."""
        [(kind, spec)] = fault.items()
        query = "watch=true" if method == "WATCH" else ""
        ident = parse_untrusted("GET" if method == "WATCH" else method, path, query, agent,
                                None, PROTOBUF, PROTOBUF)
        plan = SPECS[kind].model_validate(spec).plan(ident, random.Random(1))
        return self.journal.append("inject", **self.stamp(rule, kind), request=ident.as_dict(),
                                   action=plan.describe(), **outcome)

    def lost_create(self, rule: str, pod: dict[str, Any]) -> dict[str, Any]:
        """commitThenFail on a pod create that committed `pod` (its `written` as the addon reads the answer)."""
        meta = pod["metadata"]
        written: dict[str, Any] = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}
        for o in meta.get("ownerReferences") or []:
            if o.get("controller"):
                written["owner"] = {k: o[k] for k in ("kind", "name", "uid") if k in o}
        return self.inject(rule, {"commitThenFail": {"abort": {"status": 504}}}, "POST",
                           f"/api/v1/namespaces/{meta['namespace']}/pods", upstreamStatus=201, written=written)

    def watch_event(self, rule: str, action: str, event: WatchEvent | None = None, **fields: Any) -> dict[str, Any]:
        """A `watch-event` of the rule's last injection (its watch), as watch_edits.edited notes it."""
        stamp = {"profile": self.profile, "epoch": self.epoch, "seed": 7, "rule": rule,
                 "fault": fields.pop("fault", "dropEvents"), "match": self.turns[rule], "injection": self.turns[rule]}
        return self.journal.append("watch-event", **stamp, stream="flow-1", action=action,
                                   **(event.as_dict() if event else {}), **fields)
