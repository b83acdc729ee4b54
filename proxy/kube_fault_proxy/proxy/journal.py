"""The journal: one JSON line per injection and per (de)activation, flushed to the OS as it is written
(a crashed process loses nothing; a power loss may lose the last records, never glue two together)."""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from kube_fault_proxy.paths import append_private

Record = dict[str, Any]


def _last_seq(path: Path) -> int:
    """The highest seq already in a journal file, so numbering continues after a restart."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            lines = f.read().splitlines()
    except FileNotFoundError:
        return 0
    for line in reversed(lines):
        try:
            return int(json.loads(line)["seq"])
        except (ValueError, KeyError, TypeError):
            continue
    return 0


def _is_record(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def repair_torn_tail(path: Path) -> int:
    """End a last line that a power loss left unterminated, so the next record starts a line of its
    own: a whole record gets its newline, a part of one is cut; returns the bytes cut."""
    try:
        with path.open("r+b") as f:
            end = f.seek(0, os.SEEK_END)
            if end == 0:
                return 0
            f.seek(end - 1)
            if f.read(1) == b"\n":
                return 0
            keep, pos = 0, end
            while pos > 0:  # find the last newline, reading backwards in blocks
                step = min(65536, pos)
                pos -= step
                f.seek(pos)
                block = f.read(step)
                nl = block.rfind(b"\n")
                if nl >= 0:
                    keep = pos + nl + 1
                    break
            f.seek(keep)
            tail = f.read()
            if _is_record(tail):
                f.write(b"\n")
                return 0
            f.truncate(keep)
            return end - keep
    except FileNotFoundError:
        return 0


class Journal:
    """Appends records to a JSONL file (if any) and keeps the newest in memory for the API."""

    def __init__(self, path: Path | None, wall: Callable[[], float], keep: int = 20000) -> None:
        self.path = path
        self._wall = wall
        self._recent: deque[Record] = deque(maxlen=keep)
        self._file: IO[str] | None = None
        self.seq = 0
        self.torn_bytes = 0  # what repair_torn_tail cut when the file was opened
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.torn_bytes = repair_torn_tail(path)
            self.seq = _last_seq(path)
            self._file = append_private(path)  # 0600: it holds request paths, object names, user agents

    def append(self, event: str, **fields: Any) -> Record:
        """Write one record now; nothing is buffered past this call."""
        self.seq += 1
        record: Record = {"seq": self.seq, "time": round(self._wall(), 6), "event": event, **fields}
        self._recent.append(record)
        if self._file is not None:
            self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
            self._file.flush()
        return record

    def since(self, seq: int = 0, limit: int = 1000) -> list[Record]:
        """Records with a sequence number above seq, oldest first, at most limit."""
        newer: list[Record] = []
        for r in reversed(self._recent):  # seqs only grow: stop at the first old one, not at the start
            if r["seq"] <= seq:
                break
            newer.append(r)
        newer.reverse()
        return newer[:limit]

    def close(self) -> None:
        """Sync and close the file; later appends stay in memory only."""
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
