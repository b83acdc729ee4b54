"""A search trial's actions performed during its faulted load, each once its trigger is reached (the table of
actions and triggers: rig/actions/trial_churn.py; how the counters and the journal are read:
rig/runs/triggers.py)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
from lightkube import ApiError

from kube_fault_proxy.kube.kubeapi import HTTPError
from kube_fault_proxy.proxy.control.client import ControlError
from kube_fault_proxy.rig.actions.trial_churn import COUNTS, Action, faulted_pod, summary, trigger
from kube_fault_proxy.rig.runs.triggers import FaultRecords, binds_answered, binds_succeeded

POLL = 0.05  # seconds between reads of the proxy's bind count: a wave answers hundreds a second


class Runner(threading.Thread):
    """Performs a trial's actions, each once its trigger is reached: polls the proxy's Binding counters (`binds`,
    its `bindsTotal`), from the counts when it was made, and the fault records of its journal (`faults`, from the
    load's start). `finish` stops it: an action under way ends (a flap creates its node again), an action whose
    trigger was not reached is recorded as not done."""

    def __init__(self, actions: Sequence[Action], pods: int, binds: Callable[[], Mapping[str, Any]],
                 perform: Callable[[Action, threading.Event], str], note: Callable[[str], None],
                 faults: FaultRecords | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(daemon=True)
        self.pending = list(actions)
        self.pods, self.binds, self.perform, self.note, self.clock = pods, binds, perform, note, clock
        self.faults = faults
        self.base = self.counts(binds())
        self.reached: dict[int, float] = {}  # action index (in the genome) -> when its count was reached
        self.index = {id(a): i for i, a in enumerate(actions)}
        self.stop = threading.Event()  # no new action
        self.abort = threading.Event()  # an action under way ends early (the trial is being torn down)
        self.busy = threading.Lock()  # held while an action is under way
        self.done = 0
        self.last: float | None = None  # when (clock) the last action ended

    @staticmethod
    def counts(binds: Mapping[str, Any]) -> dict[str, int]:
        """The bind counts each count trigger reads, from the proxy's `bindsTotal`."""
        return {"afterBinds": binds_succeeded(binds), "afterBindAnswers": binds_answered(binds)}

    def counted(self, action: Action, binds: Mapping[str, Any]) -> bool:
        """Whether a count trigger is reached at these counters (`bindsTotal`)."""
        key = next(k for k in COUNTS if k in action)
        return self.counts(binds)[key] - self.base[key] >= trigger(action, self.pods)

    def due(self, now: float) -> list[Action]:
        """The pending actions whose trigger is reached (read the bind counters and the journal at most once)."""
        binds: Mapping[str, Any] | None = None
        read = False
        out = []
        for action in self.pending:
            i = self.index[id(action)]
            if i not in self.reached:
                if "onFault" in action:
                    if self.faults is not None and not read:
                        self.faults.read()
                        read = True
                    if self.faults is not None and self.faults.fired(str(action["onFault"])) is not None:
                        self.reached[i] = now
                else:
                    if binds is None:
                        binds = self.binds()
                    if self.counted(action, binds):
                        self.reached[i] = now
            if i in self.reached and now >= self.reached[i] + float(action.get("after", 0.0)):
                out.append(action)
        return out

    def performed(self, action: Action) -> Action:
        """The action as it is performed: one that acts on what its fault's request named is told the pod."""
        fired = self.faults.fired(str(action["onFault"])) if "onFault" in action and self.faults else None
        return faulted_pod(action, fired)

    def tick(self) -> None:
        """Perform every action that is due, in order; a failure is recorded, not raised."""
        for action in self.due(self.clock()):
            self.pending.remove(action)
            with self.busy:
                try:
                    what = self.perform(self.performed(action), self.abort)
                    self.done += 1
                except (ApiError, HTTPError, httpx.HTTPError, KeyError, ValueError) as e:
                    what = f"{action['do']} failed: {type(e).__name__}: {e}"
                self.last = self.clock()
            self.note(what)

    def run(self) -> None:
        while not self.stop.is_set() and self.pending:
            with contextlib.suppress(ApiError, HTTPError, httpx.HTTPError, ControlError, KeyError, ValueError, OSError):
                self.tick()  # the bind count unread this time: read again at the next poll
            self.stop.wait(POLL)

    def settling(self, quiet: float, binds: Mapping[str, Any] | None = None) -> bool:
        """Whether an action is under way, one is still to come whose trigger was reached (by the runner, or a
        count by `binds`, the proxy's `bindsTotal` a snapshot read since), or the last ended less than `quiet` ago:
        the scheduler's view of the nodes has not settled."""
        if self.busy.locked() or any(self.index[id(a)] in self.reached for a in self.pending):
            return True
        if binds is not None and any(self.counted(a, binds) for a in self.pending if "onFault" not in a):
            return True
        return self.last is not None and self.clock() < self.last + quiet

    def finish(self, abort: bool = False) -> None:
        """No new action; the one under way ends (at once, with `abort`); each left is recorded as not done."""
        self.stop.set()
        if abort:
            self.abort.set()
        if self.is_alive():
            self.join(120)
        for action in self.pending:
            why = "its fault did not fire" if "onFault" in action else "its count was not reached"
            self.note(f"not done: {summary(action)} ({why})")
        self.pending = []
