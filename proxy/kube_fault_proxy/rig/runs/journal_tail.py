"""The proxy's journal as a scenario's timeline reads it while it waits for a record: from the journal file when
the local control plane keeps one (read within a poll of the write, however busy the proxy is), else through
the proxy's control plane (served on the proxy's own event loop: in a wave of hundreds of Bindings a read
took 5-7 s here)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import httpx

from kube_fault_proxy.proxy.control.client import ControlClient, ControlError


class JournalTail:
    """New journal records since it was made: `read()` returns those written since the last read."""

    def __init__(self, control: str, cursor: int, path: Path | None = None) -> None:
        self.control, self.cursor, self.path = control, cursor, path
        self.offset = path.stat().st_size if path is not None and path.exists() else 0
        self.partial = b""  # a line the proxy had not finished writing at the last read

    def read(self) -> list[dict[str, Any]]:
        """The records written since the last read (none if the journal cannot be read right now)."""
        if self.path is None:
            with contextlib.suppress(httpx.HTTPError, ControlError), ControlClient(self.control) as control:
                page = control.journal_after(self.cursor)
                self.cursor = page.next
                return list(page.records)
            return []
        try:
            with self.path.open("rb") as f:
                if f.seek(0, 2) < self.offset:  # a new file (the proxy started again): from its start
                    self.offset, self.partial = 0, b""
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        self.offset += len(data)
        *lines, self.partial = (self.partial + data).split(b"\n")
        return [r for r in (_record(line) for line in lines) if r is not None]


def _record(line: bytes) -> dict[str, Any] | None:
    with contextlib.suppress(ValueError):
        r = json.loads(line)
        if isinstance(r, dict):
            return r
    return None
