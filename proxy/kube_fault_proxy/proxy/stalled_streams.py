"""A stalled stream's state (`stallStream`), pure: which of the apiserver's bytes reach the client, which are
withheld, and when the silence began. The addon `mitm/stream_stalls.py` runs it on the stream; the kind's module
`faults/stall_stream.py` decides it."""

from __future__ import annotations

from kube_fault_proxy.proxy.faults.plan import StallAnswer

PROTOBUF = "application/vnd.kubernetes.protobuf"


class WatchFrames:
    """Counts a watch's whole events in its bytes, however chunks cut them: JSON lines, or protobuf frames
    (a 4-byte big-endian length, then the event)."""

    def __init__(self, protobuf: bool) -> None:
        self.protobuf = protobuf
        self.count = 0
        self._header = bytearray()  # protobuf: the length read so far
        self._left = 0  # protobuf: the bytes of the current event still to come

    def until(self, chunk: bytes, total: int) -> int | None:
        """Read `chunk`; the offset just past the event that makes `total`, if it ends in this chunk (the
        count then stops there)."""
        if self.count >= total:
            return 0
        pos = 0
        while pos < len(chunk):
            if not self.protobuf:
                nl = chunk.find(b"\n", pos)
                if nl < 0:
                    return None
                pos = nl + 1
            elif self._left:
                step = min(self._left, len(chunk) - pos)
                self._left -= step
                pos += step
                if self._left:
                    return None
            else:
                need = 4 - len(self._header)
                self._header += chunk[pos:pos + need]
                pos += min(need, len(chunk) - pos)
                if len(self._header) < 4:
                    return None
                self._left = int.from_bytes(self._header, "big")
                self._header.clear()
                if self._left:
                    continue
            self.count += 1
            if self.count >= total:
                return pos
        return None


class StreamStall:
    """One watch's stall: what passes, what is withheld, and when the silence began (monotonic seconds)."""

    def __init__(self, step: StallAnswer, content_type: str, began: float) -> None:
        self.step = step
        self.frames = WatchFrames(content_type.split(";")[0].strip() == PROTOBUF)
        self.due = began + step.after_seconds if step.after_seconds is not None else None
        # Silent from the answer's first byte (after no event, or after no time): the silence begins with it.
        self.stalled_at: float | None = began if step.after_events == 0 or step.after_seconds == 0 else None
        self.withheld_bytes = 0
        self.ended = False  # the stall is over: the stream ended, or is being ended

    @property
    def ends_at(self) -> float | None:
        """When the window closes (None: not stalled yet)."""
        return None if self.stalled_at is None else self.stalled_at + self.step.seconds

    def start(self, now: float) -> bool:
        """The silence begins now (a timer at `due`); False if it already had."""
        if self.stalled_at is not None:
            return False
        self.stalled_at = now
        return True

    def feed(self, data: bytes, now: float) -> list[bytes]:
        """What of the apiserver's chunk reaches the client."""
        if self.ended:  # over: a stall that had begun withholds the rest until the end; one that had not, none
            return [] if self.stalled_at is not None else [data]
        if self.stalled_at is None and self.due is not None and now >= self.due:
            self.stalled_at = self.due
        if self.stalled_at is None and self.step.after_events is not None:
            cut = self.frames.until(data, self.step.after_events)
            if cut is None:
                return [data]
            self.stalled_at = now
            self.withheld_bytes += len(data) - cut
            return [data[:cut]] if cut else []
        if self.stalled_at is None:
            return [data]
        self.withheld_bytes += len(data)
        return []
