"""The resourceVersions the proxy saw pass, per resource, in bounded rings: what `staleList` serves from.

Kept per (group, resource), across namespaces: a resourceVersion is etcd's one global revision, so a
LIST of any namespace can be served at any revision the proxy saw. Two rings per resource:
- *seen*: (time, revision), one entry per `BUCKET_SECONDS` (the newest revision of that slice),
  revisions only growing — for `lagSeconds`;
- *writes*: the revisions of writes (watch events' objects, write answers), sorted, deduplicated (a
  create's answer and its ADDED event are one write) — for `lagWrites`. A 2xx write whose answer
  carries no revision (a DELETE or a Binding answered with a `Status`, an encoded answer) counts
  too, as `F + 0.5` where F is the newest revision seen when its answer came: it committed after F.
  Such an answer and a watch event nobody answered for (the same write, seen twice) pair up within
  `PAIR_SECONDS`, whichever comes first, so one write counts once.
Revisions are read with a byte scan (`"resourceVersion":"N"`, the first in an object or an event
line: metadata comes before spec and status), never a JSON parse, so watching costs a find per event.
A protobuf answer (client-go's default: kube-controller-manager's, YuniKorn's) is read as far as its
metadata, which is the object's first field (`proto_revision`): a handful of varints, never the object.
A protobuf watch (`ProtoWatchScanner`) is read the same way, event by event, from each frame's first bytes.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kube_fault_proxy.proxy.protobuf import PROTOBUF_MAGIC, Buf, field

BUCKET_SECONDS = 0.25
SEEN_KEPT = 2400  # 600 s of history at one entry a bucket (the longest lagSeconds)
WRITES_KEPT = 1001  # the longest lagWrites, plus the revision served
MAX_RESOURCES = 64  # resources beyond it are not tracked (the API has a few dozen)
PAIR_SECONDS = 2.0  # a write's answer and its watch event arrive this close together, or are not paired
PAIRS_KEPT = 64
HEAD = 2048  # a revision further into an object or an event line than this is not looked for
MARK = b'"resourceVersion":"'
BOOKMARK = b'{"type":"BOOKMARK"'
ERROR = b'{"type":"ERROR"'

Key = tuple[str, str]  # (group, resource)


def first_revision(data: bytes, start: int = 0, end: int | None = None) -> int | None:
    """The first `"resourceVersion":"N"` between start and end (at most HEAD bytes in), as an int."""
    stop = start + HEAD if end is None else min(end, start + HEAD)
    i = data.find(MARK, start, stop)
    if i < 0:
        return None
    lo = i + len(MARK)
    hi = data.find(b'"', lo, lo + 24)
    digits = data[lo:hi] if hi > lo else b""
    return int(digits) if digits.isdigit() else None


OBJECT_META_RESOURCE_VERSION = 6  # ObjectMeta.resourceVersion's field number (k8s.io/apimachinery generated.proto)
LIST_META_RESOURCE_VERSION = 2  # ListMeta.resourceVersion's


def proto_revision(body: Buf, cut: bool = False) -> int | None:
    """The resourceVersion of a protobuf answer (`k8s\\0` + runtime.Unknown{typeMeta: 1, raw: 2}): the raw
    object's first field is its ObjectMeta (a List's: its ListMeta), which holds it; None for a Status, an
    empty one, or bytes that are not such an answer. Read through views: the answer is never copied. `cut`:
    `body` is only the answer's first bytes (the revision itself must be whole in them)."""
    if body[:len(PROTOBUF_MAGIC)] != PROTOBUF_MAGIC:  # a view compares by content: nothing copied
        return None
    try:
        unknown = memoryview(body)[len(PROTOBUF_MAGIC):]
        type_meta, raw = field(unknown, 1), field(unknown, 2, cut)
        kind = bytes(field(type_meta, 2) or b"") if type_meta is not None else b""
        if raw is None or kind == b"Status":
            return None
        meta = field(raw, 1, cut)
        number = LIST_META_RESOURCE_VERSION if kind.endswith(b"List") else OBJECT_META_RESOURCE_VERSION
        found = field(meta, number) if meta is not None else None
    except ValueError:  # a truncated or unknown field: not such an answer
        return None
    digits = bytes(found) if found is not None and len(found) <= 20 else b""
    return int(digits) if digits.isdigit() else None


@dataclass(frozen=True, slots=True)
class Choice:
    """A past revision to serve, and how far back it is."""

    revision: int
    seen_seconds_ago: float | None  # when the proxy last saw it as the newest (None: not in the seen ring)
    writes_since: int  # writes of the resource the proxy saw after it
    newest: int  # the newest revision the proxy saw of the resource


class _Resource:
    __slots__ = ("anchor", "seen", "unanswered", "unrevisioned", "writes")

    def __init__(self) -> None:
        self.seen: deque[tuple[float, int]] = deque(maxlen=SEEN_KEPT)
        self.anchor = float("-inf")  # when the newest seen entry's bucket began
        self.writes: list[float] = []  # a revision, or F + 0.5 for a write known only to come after F
        self.unrevisioned: deque[tuple[float, float]] = deque(maxlen=PAIRS_KEPT)  # (when, entry) awaiting its event
        self.unanswered: deque[tuple[float, int]] = deque(maxlen=PAIRS_KEPT)  # (when, revision) of events

    def newest(self) -> int:
        return max(self.seen[-1][1] if self.seen else 0, math.floor(self.writes[-1]) if self.writes else 0)

    def has_write(self, revision: int) -> bool:
        """Whether this revision is in the ring already."""
        i = bisect.bisect_left(self.writes, revision)
        return i < len(self.writes) and self.writes[i] == revision

    def add_write(self, entry: float) -> bool:
        """The write in the ring, in order; False if it is there already or older than everything kept."""
        writes = self.writes
        if not writes or entry > writes[-1]:
            writes.append(entry)
        else:
            i = bisect.bisect_left(writes, entry)
            if (writes[i] == entry and entry.is_integer()) or (i == 0 and len(writes) >= WRITES_KEPT):
                return False
            writes.insert(i, entry)
        if len(writes) > WRITES_KEPT:
            del writes[0]
        return True


class RevisionLog:
    """Revisions seen per resource; `choose_*` pick the one to serve or say why there is none."""

    def __init__(self) -> None:
        self._resources: dict[Key, _Resource] = {}
        self.untracked = 0  # observations of resources beyond MAX_RESOURCES

    def _get(self, key: Key) -> _Resource | None:
        res = self._resources.get(key)
        if res is None:
            if len(self._resources) >= MAX_RESOURCES:
                self.untracked += 1
                return None
            res = self._resources[key] = _Resource()
        return res

    def seen(self, key: Key, revision: int, now: float, write: bool, from_watch: bool = False) -> None:
        """The proxy saw this revision of the resource pass now (a write's own, or a list's or bookmark's);
        `from_watch`: in a watch event (which may be a write whose answer had no revision)."""
        res = self._get(key)
        if res is None:
            return
        seen = res.seen
        if not seen or revision > seen[-1][1]:
            if seen and now - res.anchor < BUCKET_SECONDS:
                seen[-1] = (now, revision)  # the same slice: its newest revision, last seen now
            else:
                seen.append((now, revision))
                res.anchor = now
        if not write:
            return
        if not from_watch:
            if not res.add_write(revision):  # its event came first: answered now
                _forget(res.unanswered, lambda e: e[1] == revision)
            return
        _expire(res.unrevisioned, now)
        if res.unrevisioned and not res.has_write(revision):
            for i, (_, entry) in enumerate(res.unrevisioned):
                if entry < revision:  # the event of a write whose answer had no revision
                    del res.unrevisioned[i]
                    res.writes.remove(entry)
                    res.add_write(revision)
                    return
        if res.add_write(revision):
            res.unanswered.append((now, revision))

    def unrevisioned(self, key: Key, now: float) -> None:
        """A 2xx write of the resource answered without a revision the proxy can read: it counts once."""
        res = self._get(key)
        if res is None:
            return
        _expire(res.unanswered, now)
        if res.unanswered:  # its watch event came first and is counted already
            res.unanswered.popleft()
            return
        entry = res.newest() + 0.5
        if res.add_write(entry):
            res.unrevisioned.append((now, entry))

    def newest(self, key: Key) -> int | None:
        """The newest revision seen of the resource."""
        res = self._resources.get(key)
        if res is None or not res.seen:
            return None
        return res.newest()

    def choose_seconds(self, key: Key, seconds: float, now: float) -> Choice | str:
        """The newest revision seen at least `seconds` ago, or why there is none."""
        res = self._resources.get(key)
        if res is None or not res.seen:
            return f"no revision of {_name(key)} seen yet"
        seen = res.seen
        cutoff = now - seconds
        i = bisect.bisect_right(seen, cutoff, key=lambda e: e[0]) - 1
        if i < 0:
            return (f"no revision of {_name(key)} seen {seconds:g}s ago or earlier "
                    f"(the oldest kept was seen {now - seen[0][0]:.1f}s ago)")
        when, revision = seen[i]
        return self._choice(res, revision, now - when)

    def choose_writes(self, key: Key, writes: int, now: float) -> Choice | str:
        """The revision just before the `writes`-th last write seen (so exactly that many are hidden),
        or why there is none."""
        res = self._resources.get(key)
        if res is None or len(res.writes) < writes:
            have = 0 if res is None else len(res.writes)
            return f"{have} writes of {_name(key)} seen, {writes} needed to hide {writes}"
        revision = math.ceil(res.writes[-writes]) - 1  # a revision's predecessor; F for F + 0.5
        if revision < 1:
            return f"no revision of {_name(key)} known before the write {writes} writes back"
        seen = res.seen
        i = bisect.bisect_right(seen, revision, key=lambda e: e[1]) - 1
        ago = now - seen[i][0] if i >= 0 and seen[i][1] == revision else None
        return self._choice(res, revision, ago)

    def _choice(self, res: _Resource, revision: int, ago: float | None) -> Choice:
        since = len(res.writes) - bisect.bisect_right(res.writes, revision)
        return Choice(revision, ago, since, res.newest())

    def sizes(self) -> dict[str, int]:
        """Entries kept (for tests and the bound)."""
        return {_name(k): len(r.seen) + len(r.writes) for k, r in self._resources.items()}


def _expire(pairs: deque[tuple[float, float]] | deque[tuple[float, int]], now: float) -> None:
    while pairs and now - pairs[0][0] > PAIR_SECONDS:
        pairs.popleft()


def _forget(pairs: deque[tuple[float, int]], which: Callable[[tuple[float, int]], bool]) -> None:
    for i, pair in enumerate(pairs):
        if which(pair):
            del pairs[i]
            return


def _name(key: Key) -> str:
    group, resource = key
    return f"{resource}.{group}" if group else resource


class WatchScanner:
    """Feeds a watch stream's bytes, chunk by chunk, and reports each event line's first revision
    (the object's own) and whether the event is a write (not a BOOKMARK or an ERROR); nothing is copied
    but the first bytes of a line split across chunks."""

    def __init__(self, report: Callable[[int, bool], None]) -> None:
        self._report = report
        self._head = b""  # the start of the current unfinished line (at most HEAD bytes)
        self._done = False  # the current line's revision already reported (or looked for in HEAD bytes)

    def feed(self, data: bytes) -> None:
        """One chunk of the stream, as the apiserver sent it."""
        start = 0
        while (nl := data.find(b"\n", start)) >= 0:
            if self._head:
                self._line(self._head + data[start:min(nl, start + HEAD)])
                self._head = b""
            elif not self._done:
                self._line(data, start, nl)
            self._done = False
            start = nl + 1
        if start < len(data) and not self._done:
            self._head += data[start:start + HEAD - len(self._head)]
            if len(self._head) >= HEAD or first_revision(self._head) is not None:
                self._line(self._head)  # its revision is here already (or never will be): report it now
                self._head, self._done = b"", True

    def _line(self, data: bytes, start: int = 0, end: int | None = None) -> None:
        revision = first_revision(data, start, end)
        if revision is not None:
            self._report(revision, not (data.startswith(BOOKMARK, start) or data.startswith(ERROR, start)))



FRAME_PREFIX = 4  # a protobuf watch frame's length: 4 bytes, big-endian (apimachinery's LengthDelimitedFramer)
WATCH_EVENT_TYPE, WATCH_EVENT_OBJECT, RAW_EXTENSION_RAW = 1, 2, 1  # metav1.WatchEvent{type, object{raw}}
NOT_WRITES = (b"BOOKMARK", b"ERROR")


def proto_event(head: Buf) -> tuple[int, bool] | None:
    """A protobuf watch event's object revision and whether the event is a write (not a BOOKMARK or an ERROR),
    from the frame's first bytes: a metav1.WatchEvent whose object's raw is the object in the `k8s\\0`
    envelope (the apiserver's embedded encoder). None for an ERROR's Status or bytes that are not an event."""
    try:
        kind = field(head, WATCH_EVENT_TYPE)
        extension = field(head, WATCH_EVENT_OBJECT, cut=True)
        raw = field(extension, RAW_EXTENSION_RAW, cut=True) if extension is not None else None
    except ValueError:
        return None
    revision = proto_revision(raw, cut=True) if raw is not None else None
    if revision is None:
        return None
    return revision, bytes(kind or b"") not in NOT_WRITES


class ProtoWatchScanner:
    """`WatchScanner` for a protobuf watch (client-go's default Accept): each event is a frame, its length in 4
    bytes, then a WatchEvent; only a frame's first HEAD bytes are kept (the revision is in the object's
    metadata, its first field), the rest is counted past, whatever the chunks' boundaries."""

    def __init__(self, report: Callable[[int, bool], None]) -> None:
        self._report = report
        self._prefix = b""  # the next frame's length bytes, while fewer than 4 have come
        self._left = -1  # the current frame's bytes still to come (-1: between frames)
        self._head = b""  # the current frame's first bytes (at most HEAD), while it is split across chunks

    def feed(self, data: bytes) -> None:
        """One chunk of the stream, as the apiserver sent it."""
        view, pos, end = memoryview(data), 0, len(data)
        while pos < end:
            if self._left < 0:
                if not self._prefix and pos + FRAME_PREFIX <= end:
                    length = int.from_bytes(view[pos:pos + FRAME_PREFIX], "big")
                    pos += FRAME_PREFIX
                else:  # the length split across chunks
                    got = bytes(view[pos:pos + FRAME_PREFIX - len(self._prefix)])
                    self._prefix += got
                    pos += len(got)
                    if len(self._prefix) < FRAME_PREFIX:
                        return
                    length, self._prefix = int.from_bytes(self._prefix, "big"), b""
                self._left = length
                if pos + length <= end:  # the whole frame is here: read it in place
                    self._event(view[pos:pos + min(length, HEAD)])
                    pos += length
                    self._left = -1
                    continue
            take = min(self._left, end - pos)
            if len(self._head) < HEAD:
                self._head += bytes(view[pos:pos + min(take, HEAD - len(self._head))])
            pos += take
            self._left -= take
            if self._left == 0:
                self._event(self._head)
                self._head, self._left = b"", -1

    def _event(self, head: Buf) -> None:
        found = proto_event(head)
        if found is not None:
            self._report(*found)
