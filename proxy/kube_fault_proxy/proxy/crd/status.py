"""When a proxy writes its entry in an activation's status: a change of state at once, counters at
most every `interval` seconds, nothing while nothing changes; no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kube_fault_proxy.proxy.crd.objects import Obj, ProxyStatus

Key = tuple[str, str]
Entry = dict[str, Any]
COUNTERS = ("injections", "rules")  # what changes with traffic; everything else is state


def as_entry(status: ProxyStatus | None) -> Entry | None:
    """The JSON an entry is written (and read back) as."""
    return None if status is None else status.model_dump(mode="json", exclude_none=True)


def entry_in(obj: Obj, proxy: str) -> Entry | None:
    """This proxy's entry in an object's status, as the apiserver holds it."""
    for entry in (obj.get("status") or {}).get("proxies") or []:
        if isinstance(entry, dict) and entry.get("name") == proxy:
            return entry
    return None


def _state(entry: Entry | None) -> Entry | None:
    return None if entry is None else {k: v for k, v in entry.items() if k not in COUNTERS}


@dataclass(frozen=True, slots=True)
class Write:
    """One status write: this entry (None: remove this proxy's entry) for one object."""

    key: Key
    uid: str
    entry: Entry | None


class StatusThrottle:
    """Decides which entries to write now; told what was written."""

    def __init__(self, proxy: str, interval: float) -> None:
        self.proxy = proxy
        self.interval = interval
        self._written: dict[Key, tuple[str, Entry | None]] = {}  # uid, entry
        self._at: dict[Key, float] = {}

    def due(self, desired: Mapping[Key, ProxyStatus | None], objects: Mapping[Key, Obj], now: float) -> list[Write]:
        """The writes to make now: where the desired entry differs from the object's and from what was
        last written, and either its state changed or the interval has passed since the last write."""
        writes = []
        for key, status in desired.items():
            obj = objects.get(key)
            if obj is None:
                continue
            uid = obj["metadata"].get("uid", "")
            want, have = as_entry(status), entry_in(obj, self.proxy)
            written = self._written.get(key)
            last = written[1] if written is not None and written[0] == uid else have
            if want == have or (written is not None and written[0] == uid and want == written[1]):
                continue
            urgent = _state(want) != _state(last)
            if urgent or now - self._at.get(key, float("-inf")) >= self.interval:
                writes.append(Write(key, uid, want))
        for key in list(self._written):
            if key not in objects:
                del self._written[key]
                self._at.pop(key, None)
        return writes

    def wrote(self, write: Write, now: float) -> None:
        """A write went through."""
        self._written[write.key] = (write.uid, write.entry)
        self._at[write.key] = now
