"""What a timed action waits for, read from the proxy: its Binding counters and the first journal record of a fault
firing. One reading for both users: a scenario's timeline steps (`afterBinds`, `onEvent: inject` or
`crash-point`, rig/runs/timeline.py) and a search trial's actions (`afterBinds`, `afterBindAnswers`, `onFault`,
rig/actions/trial_churn.py).

The counters are the proxy's `bindsTotal` (never reset: a reader diffs them from its start). `succeeded` counts a
2xx; `answered` counts every Binding POST the proxy has answered, whatever the answer: a 2xx, a throttle, an
injected error, a reset or no answer (the three outcomes of `Counters.bind_outcome`). Under Binding faults the
successes may never reach a count; the answers do.

A fault fires when the proxy journals an `inject` record (a rule's injection, carried out) or a `crash-point`
record (a committed answer is held). `FaultRecords` keeps the first record of each, by event, by fault kind, by
rule name, `any` (the first of all) and `held` (the first answer held: a `crash-point` record)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

# Journal events that are a fault firing (the timeline waits for them as `onEvent`; an action as `onFault`).
FIRED = ("crash-point", "inject")
ANY = "any"  # onFault: the first fault that fires, of any rule
HELD = "held"  # onFault: the first answer a crash point holds


def binds_succeeded(binds: Mapping[str, Any]) -> int:
    """Binding POSTs answered with a 2xx (the proxy's `bindsTotal`)."""
    return int(binds["succeeded"])


def binds_answered(binds: Mapping[str, Any]) -> int:
    """Binding POSTs answered at all: succeeded, throttled, or failed (an error, a reset, no answer)."""
    return int(binds["succeeded"]) + int(binds["throttled"]) + int(binds["failed"])


class Tail(Protocol):
    """A journal reader: the records written since its last read (rig/runs/journal_tail.JournalTail)."""

    def read(self) -> list[dict[str, Any]]: ...


class FaultRecords:
    """The first record of each fault firing the tail has shown: by event (`crash-point`, `inject`) and by what
    an action's `onFault` may name (a fault kind, a rule name, `any`, `held`)."""

    def __init__(self, tail: Tail) -> None:
        self.tail = tail
        self.by_event: dict[str, dict[str, Any]] = {}
        self.by_fault: dict[str, dict[str, Any]] = {}

    def read(self) -> list[dict[str, Any]]:
        """Read the tail once; the fault records new to it, in order."""
        new = [r for r in self.tail.read() if r.get("event") in FIRED]
        for r in new:
            self.by_event.setdefault(str(r["event"]), r)
            for key in keys(r):
                self.by_fault.setdefault(key, r)
        return new

    def fired(self, name: str) -> dict[str, Any] | None:
        """The first record of a fault kind, rule, `any` or `held` seen so far (read first)."""
        return self.by_fault.get(name)


def keys(record: Mapping[str, Any]) -> list[str]:
    """What `onFault` values a fault record answers: `any`, its fault kind and rule; `held` for a held answer."""
    out = [ANY]
    out += [str(record[k]) for k in ("fault", "rule") if record.get(k)]
    if record.get("event") == "crash-point":
        out.append(HELD)
    return out
