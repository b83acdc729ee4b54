"""The ledger: every effect the proxy's faults had on a run, read from its journal (proxy/journal.py), each with
the object it touched and when.

Pure: journal records (dicts, as the journal writes them) in, a Ledger out; `read_file` is the one reader of a
journal file. What each journal event becomes:

- `inject` of a write whose plan never forwarded it (abort, throttle, reset, a hang that answers): a write
  **failed before the apiserver**;
- `inject` of commitThenFail or crashPoint (the apiserver answered 2xx, the client got an error, a reset or
  nothing): a write **committed unanswered**, naming its object from `written` (a create's request has none);
- `late-commit` that committed (failThenCommit): a write **committed after its error**; one that did not: failed;
- `watch-event` dropped / duplicated: that event of that object; delayed / held / coalesced: a batch of the
  watch's events (count and seconds), on the resource of the watch its `inject` opened (same rule and injection);
  cut: a **connection cut**;
- `inject` of staleList or twoViews: a **stale revision served** (servedResourceVersion) for that resource;
- `inject` of resetUpstream, `upstream-lost`: a **connection cut**; `outage-start`: an **outage** (seconds);
- each write in the `inFlight` list of a resetUpstream `inject` or an `outage-start` (forwarded to the apiserver,
  not yet answered when the cut failed it): a write **cut in flight**, naming its object from the request (a
  create's generateName and controller from its body). It may or may not have committed: the ledger counts it as
  one that may have. One the apiserver had already refused (a non-2xx `upstreamStatus`) is none. A journal
  written before the proxy listed them has no `inFlight`: it names none.

Records of other events (activations, proxy starts, skipped rules) are no effect and are passed over.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

EffectKind = Literal["committed-unanswered", "failed-before-apiserver", "committed-after-error", "event-dropped",
                     "event-duplicated", "events-delayed", "events-held", "events-coalesced", "stale-served",
                     "connection-cut", "outage", "cut-in-flight"]
KINDS: tuple[EffectKind, ...] = ("committed-unanswered", "failed-before-apiserver", "committed-after-error",
                                 "event-dropped", "event-duplicated", "events-delayed", "events-held",
                                 "events-coalesced", "stale-served", "connection-cut", "outage", "cut-in-flight")
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})
STALE = frozenset({"staleList", "twoViews"})  # a read served at a past revision (twoViews: on its lagging view)
UNANSWERED = frozenset({"commitThenFail", "crashPoint"})  # the write committed, the client never saw it succeed
WATCH_ACTIONS: dict[str, EffectKind] = {"dropped": "event-dropped", "duplicated": "event-duplicated",
                                        "delayed": "events-delayed", "held": "events-held",
                                        "coalesced": "events-coalesced", "cut": "connection-cut",
                                        "cut-at-end": "connection-cut"}
Record = Mapping[str, Any]


class LedgerError(ValueError):
    """A journal record the ledger cannot read: names the source, the line (or seq) and the field."""


@dataclass(frozen=True)
class Touched:
    """The object an effect touched, as far as the journal names it ('' where it does not)."""

    resource: str = ""  # pods, replicasets, ... (a watch event's: its watch's resource)
    namespace: str = ""
    name: str = ""
    uid: str = ""
    generate_name: str = ""  # a create cut in flight with no name: the prefix it asked for
    owner_kind: str = ""  # the controller ownerReference the committed object carried (`written.owner`)
    owner_name: str = ""
    owner_uid: str = ""

    def show(self) -> str:
        """resource ns/name (owner Kind/name), as far as known."""
        name = self.name or (f"{self.generate_name}*" if self.generate_name else "")
        where = "/".join(p for p in (self.namespace, name) if p) or "(unnamed)"
        owner = f" of {self.owner_kind} {self.owner_name or self.owner_uid}" if self.owner_kind else ""
        return f"{self.resource or '?'} {where}{owner}"


@dataclass(frozen=True)
class Effect:
    """One thing the proxy did to the run: its kind, when (epoch s), the rule and fault that did it, the verb (a
    watch event's type for an event), the object, and for a batch or an outage how many events and how long."""

    kind: EffectKind
    time: float
    seq: int
    fault: str
    rule: str
    verb: str
    touched: Touched
    events: int = 1
    seconds: float = 0.0
    revision: str = ""  # a dropped or duplicated event's resourceVersion (the object as that event carried it)
    opened: float = 0.0  # a watch event's: when its watch was opened (its `inject` record), 0 when not journaled

    def show(self, t0: float = 0.0) -> str:
        """One line: `committed-unanswered create pods ns/web-x of ReplicaSet web at 3.2s`."""
        extra = f", {self.events} events" if self.kind.startswith("events-") else ""
        extra += f", {self.seconds:g}s" if self.seconds else ""
        return f"{self.kind} {self.verb} {self.touched.show()} at {self.time - t0:.1f}s ({self.fault}{extra})"


@dataclass(frozen=True)
class Ledger:
    """The effects of one run, in journal order."""

    effects: tuple[Effect, ...] = ()

    def of(self, *kinds: EffectKind, resource: str | None = None, namespace: str | None = None,
           verb: str | None = None) -> list[Effect]:
        """The effects of these kinds (all if none) on that resource, namespace and verb (any if None)."""
        return [e for e in self.effects if (not kinds or e.kind in kinds)
                and (resource is None or e.touched.resource == resource)
                and (namespace is None or e.touched.namespace == namespace) and (verb is None or e.verb == verb)]

    def counts(self) -> dict[str, int]:
        """Effects per kind (kinds with none left out)."""
        counted = Counter(e.kind for e in self.effects)
        return {k: counted[k] for k in KINDS if counted[k]}

    def in_namespace(self, namespace: str) -> Ledger:
        """The effects on objects of one namespace, plus those of no namespace (outages, cut connections)."""
        return Ledger(tuple(e for e in self.effects if e.touched.namespace in ("", namespace)))


def _text(record: Record, name: str, where: str) -> str:
    value = record.get(name)
    if not isinstance(value, str) or not value:
        raise LedgerError(f"{where}: field {name!r} is {value!r}, not a non-empty string")
    return value


def _number(record: Record, name: str, where: str) -> float:
    value = record.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LedgerError(f"{where}: field {name!r} is {value!r}, not a number")
    return float(value)


def _touched(request: Record, written: Record | None = None) -> Touched:
    w = written or {}
    owner = w.get("owner") or {}
    return Touched(resource=str(request.get("resource") or ""),
                   namespace=str(w.get("namespace") or request.get("namespace") or ""),
                   name=str(w.get("name") or request.get("name") or ""), uid=str(w.get("uid") or ""),
                   owner_kind=str(owner.get("kind") or ""), owner_name=str(owner.get("name") or ""),
                   owner_uid=str(owner.get("uid") or ""))


def _verb(request: Record) -> str:
    sub = request.get("subresource")
    return f"{request.get('verb', '')}{'/' + str(sub) if sub else ''}"


def _forwarded(action: str) -> bool:
    return "forward" in action.split(", then ")


def _in_flight(record: Record, where: str, fault: str) -> list[Effect]:
    """The writes a cut failed in flight (`inFlight`), each a `cut-in-flight` effect; none for a record without
    the field (a journal older than it) or a write the apiserver had already refused."""
    listed = record.get("inFlight")
    if listed is None:
        return []
    if not isinstance(listed, list):
        raise LedgerError(f"{where}: field 'inFlight' is {listed!r}, not a list")
    time, seq = _number(record, "time", where), int(_number(record, "seq", where))
    out = []
    for i, entry in enumerate(listed):
        if not isinstance(entry, Mapping) or entry.get("verb") not in WRITES or not isinstance(entry.get("resource"),
                                                                                                str):
            raise LedgerError(f"{where}: field 'inFlight[{i}]' is {entry!r}, not a write with a verb and a resource")
        owner = entry.get("owner")
        if owner is not None and not isinstance(owner, Mapping):
            raise LedgerError(f"{where}: field 'inFlight[{i}].owner' is {owner!r}, not an object")
        status = entry.get("upstreamStatus")
        if isinstance(status, int) and not 200 <= status < 300:
            continue  # the apiserver refused it before the cut: nothing committed
        touched = Touched(resource=str(entry["resource"]), namespace=str(entry.get("namespace") or ""),
                          name=str(entry.get("name") or ""), generate_name=str(entry.get("generateName") or ""),
                          owner_kind=str((owner or {}).get("kind") or ""),
                          owner_name=str((owner or {}).get("name") or ""),
                          owner_uid=str((owner or {}).get("uid") or ""))
        out.append(Effect("cut-in-flight", time, seq, fault, str(record.get("rule") or ""), _verb(entry), touched))
    return out


def _inject(record: Record, where: str) -> Effect | None:
    fault, action = _text(record, "fault", where), str(record.get("action") or "")
    request = record.get("request")
    if not isinstance(request, Mapping):
        raise LedgerError(f"{where}: field 'request' is {request!r}, not an object")
    time, seq = _number(record, "time", where), int(_number(record, "seq", where))

    def effect(kind: EffectKind, touched: Touched) -> Effect:
        return Effect(kind, time, seq, fault, str(record.get("rule") or ""), _verb(request), touched)

    if fault in UNANSWERED:
        status = record.get("upstreamStatus")
        if not isinstance(status, int) or not 200 <= status < 300:
            return None  # nothing committed (the journal writes such a turn as commit-skipped)
        written = record.get("written")
        return effect("committed-unanswered", _touched(request, written if isinstance(written, Mapping) else None))
    if fault in STALE:
        return effect("stale-served", _touched(request))
    if fault == "resetUpstream":
        return effect("connection-cut", _touched(request))
    if fault == "failThenCommit":
        return None  # its late-commit record says what became of it
    if request.get("verb") in WRITES and not _forwarded(action):
        return effect("failed-before-apiserver", _touched(request))
    return None


def _late(record: Record, where: str) -> Effect:
    request = record.get("request")
    if not isinstance(request, Mapping):
        raise LedgerError(f"{where}: field 'request' is {request!r}, not an object")
    written = record.get("written")
    kind: EffectKind = "committed-after-error" if record.get("committed") is True else "failed-before-apiserver"
    return Effect(kind, _number(record, "time", where), int(_number(record, "seq", where)),
                  str(record.get("fault") or "failThenCommit"), str(record.get("rule") or ""), _verb(request),
                  _touched(request, written if isinstance(written, Mapping) else None),
                  seconds=float(record.get("afterSeconds") or 0.0))


def _watch(record: Record, where: str, watches: Mapping[tuple[Any, ...], tuple[Record, float]]) -> Effect | None:
    action = _text(record, "action", where)
    kind = WATCH_ACTIONS.get(action)
    if kind is None:
        return None  # delay-cap: the events it released early are in the `delayed` record that follows
    request, opened = watches.get((record.get("profile"), record.get("epoch"), record.get("rule"),
                                   record.get("injection")), ({}, 0.0))
    if action in ("dropped", "duplicated", "cut") and record.get("name"):
        touched = Touched(resource=str(request.get("resource") or ""), namespace=str(record.get("namespace") or ""),
                          name=str(record["name"]))
        verb = str(record.get("type") or "")
    else:
        touched, verb = Touched(resource=str(request.get("resource") or ""),
                                namespace=str(request.get("namespace") or "")), "watch"
    events = int(record.get("events", record.get("held", 1)) or 0)
    seconds = float(record.get("heldSeconds", record.get("maxLateSeconds", 0.0)) or 0.0)
    revision = str(record.get("resourceVersion") or "") if action in ("dropped", "duplicated") else ""
    return Effect(kind, _number(record, "time", where), int(_number(record, "seq", where)),
                  str(record.get("fault") or ""), str(record.get("rule") or ""), verb, touched, events, seconds,
                  revision, opened)


def read(records: Iterable[Record], source: str = "journal") -> Ledger:
    """The ledger of these journal records (oldest first). LedgerError names the record (`source` record N, by its
    seq) and the field when a record that is an effect lacks what the ledger reads."""
    return _read((f"{source} record {r.get('seq', f'#{i}')}", r) for i, r in enumerate(records, 1))


def read_file(path: Path) -> Ledger:
    """The ledger of a journal file (JSON Lines); LedgerError names the file, the line and the field."""
    def lines() -> Iterable[tuple[str, Record]]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as e:
                raise LedgerError(f"{path}:{n}: not a JSON record ({e})") from None
            if not isinstance(record, dict):
                raise LedgerError(f"{path}:{n}: a journal record is a JSON object, not {type(record).__name__}")
            yield f"{path}:{n}", record
    return _read(lines())


def _read(records: Iterable[tuple[str, Record]]) -> Ledger:
    effects: list[Effect] = []
    # (profile, epoch, rule, injection) -> the watch's request, and when it was opened
    watches: dict[tuple[Any, ...], tuple[Record, float]] = {}
    for where, record in records:
        event = record.get("event")
        effect: Effect | None = None
        if event == "inject":
            request = record.get("request")
            if isinstance(request, Mapping) and request.get("verb") == "watch":
                watches[(record.get("profile"), record.get("epoch"), record.get("rule"),
                         record.get("injection"))] = (request, _number(record, "time", where))
            effect = _inject(record, where)
            if effect is not None and effect.kind == "connection-cut":
                effects += [effect, *_in_flight(record, where, effect.fault)]
                continue
        elif event == "late-commit":
            effect = _late(record, where)
        elif event == "watch-event":
            effect = _watch(record, where, watches)
        elif event == "upstream-lost":
            effect = Effect("connection-cut", _number(record, "time", where), int(_number(record, "seq", where)),
                            "", "", "", Touched())
        elif event == "outage-start":
            effect = Effect("outage", _number(record, "time", where), int(_number(record, "seq", where)),
                            "outage", str(record.get("rule") or ""), "", Touched(),
                            seconds=float(record.get("seconds") or 0.0))
            effects += [effect, *_in_flight(record, where, "outage")]
            continue
        if effect is not None:
            effects.append(effect)
    return Ledger(tuple(effects))
