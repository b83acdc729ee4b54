"""What a campaign's worker says in its pod's log, and how the coordinator reads it back: each trial's trials.jsonl
record (compressed, in pieces short enough that no container runtime splits a line), then one closing line; and
which of an index's attempts (pods) the coordinator takes its records from."""

from __future__ import annotations

import base64
import json
import zlib
from dataclasses import dataclass, field
from typing import Any

RECORD = "kfp-record"  # kfp-record <seq> <part>/<parts> <base64 of zlib'd JSON>
DONE = "kfp-worker-done"  # kfp-worker-done <JSON: index, seed, steps, seconds>
PIECE = 4000  # characters of base64 a line (CRI runtimes cut log lines at 16 KiB)


def record_lines(seq: int, record: dict[str, Any]) -> list[str]:
    """One trials.jsonl record as log lines."""
    data = base64.b64encode(zlib.compress(json.dumps(record, separators=(",", ":")).encode())).decode()
    parts = [data[i:i + PIECE] for i in range(0, len(data), PIECE)] or [""]
    return [f"{RECORD} {seq} {k + 1}/{len(parts)} {p}" for k, p in enumerate(parts)]


def done_line(summary: dict[str, Any]) -> str:
    """The worker's last line: it finished its budget (an attempt without it stopped early)."""
    return f"{DONE} {json.dumps(summary, separators=(',', ':'))}"


@dataclass
class WorkerLog:
    """What one pod's log holds: its whole records in order, and its closing summary if it got that far."""

    records: list[dict[str, Any]] = field(default_factory=list)
    done: dict[str, Any] | None = None


def parse(text: str) -> WorkerLog:
    """Read a worker's log (other lines, the search's notes, are skipped; a record cut short is dropped)."""
    log, pieces = WorkerLog(), dict[int, dict[int, str]]()  # seq -> parts seen
    for line in text.splitlines():
        if line.startswith(DONE + " "):
            log.done = json.loads(line[len(DONE) + 1:])
            continue
        if not line.startswith(RECORD + " "):
            continue
        try:
            _, seq, fraction, data = [*line.split(" ", 3), ""][:4]
            part, parts = (int(x) for x in fraction.split("/"))
        except ValueError:
            continue
        got = pieces.setdefault(int(seq), {})
        got[part] = data
        if len(got) == parts:
            joined = "".join(got[k] for k in range(1, parts + 1))
            log.records.append(json.loads(zlib.decompress(base64.b64decode(joined))))
            del pieces[int(seq)]
    return log


def longer(before: WorkerLog, now: WorkerLog) -> WorkerLog:
    """A pod's log as read now, unless it holds less than an earlier read: a container's log only grows, and a
    deleted pod's may read back empty while it terminates (its log files removed first)."""
    return now if (now.done is not None, len(now.records)) >= (before.done is not None, len(before.records)) \
        else before


@dataclass
class Attempt:
    """One pod of the Job: an attempt at its completion index."""

    index: int
    pod: str
    node: str | None
    phase: str  # Pending, Running, Succeeded, Failed (or Gone: deleted before it ended)
    log: WorkerLog = field(default_factory=WorkerLog)
    started: str | None = None  # the pod's status.startTime
    finished: str | None = None  # the container's finishedAt
    reason: str | None = None  # why it failed (the container's termination reason and exit code)

    @property
    def complete(self) -> bool:
        """It ran its budget out and said so."""
        return self.phase == "Succeeded" and self.log.done is not None

    def as_dict(self) -> dict[str, Any]:
        """JSON form (campaign.json)."""
        return {"index": self.index, "pod": self.pod, "node": self.node, "phase": self.phase,
                "records": len(self.log.records), "done": self.log.done, "started": self.started,
                "finished": self.finished, "reason": self.reason}


def chosen(attempts: list[Attempt]) -> dict[int, Attempt]:
    """Per index, the attempt whose records the coordinator takes: the one that succeeded (its log closed); when
    none did, the one with the most records (its trials ran; the report says the index did not finish)."""
    best: dict[int, Attempt] = {}
    for a in attempts:
        b = best.get(a.index)
        if b is None or (a.complete, len(a.log.records)) > (b.complete, len(b.log.records)):
            best[a.index] = a
    return dict(sorted(best.items()))
