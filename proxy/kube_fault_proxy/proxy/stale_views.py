"""Stale views: the revisions the proxy sees pass, and what `staleList` (and `twoViews`) sends instead of a request.

Every answer of a resource request (JSON, or protobuf as far as its metadata) and every watch stream (JSON, or
protobuf event by event as far as the object's metadata; a gzip-encoded one from a decoded copy) is read, never
changed: the first `resourceVersion`
of an answer (a list's own, or the object's) and of each watch event goes into the revision log; a 2xx write
whose answer has none (a `Status`) is counted as a write all the same. A `staleList` decision picks its
revision there as the request leaves (a `twoViews` decision first pins the client connection to a view, in
`ViewPins`, and takes that view's lag): the stale views' addons (`proxy/mitm/stale_reads.py`) send the rewritten
request this returns, and for a GET put the object this reads back in place of the LIST. A JSON watch's events
are offered, as they are read, to the watches that wait for one (`WatchSignals`, which the watch edits' addon
hands their editors). Plain data in and out; one per proxy, made by `mitm/server.py` and handed to the addons
that share it (the stale views' two, the late commits'); only they touch flows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from kube_fault_proxy.proxy.counters import Counters
from kube_fault_proxy.proxy.engine import Decision
from kube_fault_proxy.proxy.faults.plan import PinView, ServeStale
from kube_fault_proxy.proxy.faults.two_views import ViewPins
from kube_fault_proxy.proxy.gzip_members import GzipMembers, gzip_head
from kube_fault_proxy.proxy.requests.identity import WRITES, RequestIdentity
from kube_fault_proxy.proxy.requests.status import Reply
from kube_fault_proxy.proxy.requests.watch import TICK
from kube_fault_proxy.proxy.revisions import (
    HEAD,
    Choice,
    Key,
    ProtoWatchScanner,
    RevisionLog,
    WatchScanner,
    first_revision,
    proto_revision,
)
from kube_fault_proxy.proxy.stale_rewrites import (
    get_as_list,
    initial_events,
    initial_events_end,
    page_query,
    single_object,
    stale_query,
    stale_watch_query,
)
from kube_fault_proxy.proxy.watch_signals import LineReader, WatchSignals

# The watches whose event revisions are read, by media type; only JSON ones are offered to waiting watches.
WATCH_SCANNERS: dict[str, type[WatchScanner] | type[ProtoWatchScanner]] = {
    "application/json": WatchScanner, "application/vnd.kubernetes.protobuf": ProtoWatchScanner}
READS = frozenset({"get", "list"})
Chunks = Callable[[bytes], Iterable[bytes] | bytes]  # a streamed body's callable: b"" marks the end
Get = Callable[[str], Awaitable[tuple[int, str, bytes]]]  # path and query -> the apiserver's status, type, body


@dataclass(frozen=True, slots=True)
class StaleWatch:
    """A WatchList served from a past revision: the watch to send instead, and the initial events
    (ADDED per object, then the initial-events-end BOOKMARK) to send its client before the watch's own."""

    path: str
    initial: bytes


@dataclass(frozen=True, slots=True)
class Served:
    """A stale request as sent: its path and query, the Accept it needs, and what to journal of its answer."""

    path: str
    accept: str | None
    revision: int
    as_get: bool
    stamp: dict[str, object]


@dataclass(frozen=True, slots=True)
class Answer:
    """What came back: status, content type, its content encoding ("" for none), the body if there is one
    (decoded where the addon was asked to)."""

    status: int
    content_type: str
    encoding: str
    body: bytes | None

    @property
    def encoded(self) -> bool:
        """Whether the body (as the apiserver sent it) has a content encoding."""
        return bool(self.encoding)

    @property
    def gzip(self) -> bool:
        """A gzip body: the encoding the apiserver uses (large answers; 1.37's compressed WatchList streams)."""
        return self.encoding.strip().lower() == "gzip"

    @property
    def media_type(self) -> str:
        """The content type without its parameters (a watch's `;stream=watch`)."""
        return self.content_type.split(";")[0].strip()

    @property
    def json(self) -> bool:
        """A JSON answer (a watch's `;stream=watch` included)."""
        return self.media_type == "application/json"


class StaleViews:
    """The revision log and what `staleList` does with it; one per proxy, on the proxy's loop."""

    def __init__(self, counters: Counters, clock: Callable[[], float], signals: WatchSignals | None = None) -> None:
        self.counters = counters
        self.clock = clock
        self.log = RevisionLog()
        self.pins = ViewPins()  # twoViews: which view each client connection has
        self.signals = signals if signals is not None else WatchSignals()  # events other watches wait for

    def pin(self, ident: RequestIdentity, decision: Decision, step: PinView, connection: str,
            peer: str) -> tuple[ServeStale | None, dict[str, object]]:
        """A `twoViews` read: the lag of the view its client connection is pinned to (None: the current state,
        the read passes unchanged) and what the journal says of the view; a connection's pin journaled once."""
        pinned = self.pins.pin(decision.profile, decision.epoch, decision.seed, decision.rule, ident.user_agent,
                               connection)
        view: dict[str, object] = {"view": pinned.view, "viewLag": step.asked[pinned.view], "connection": connection}
        if pinned.new:
            self.counters.note("view-pinned", **decision.stamp(), request=ident.as_dict(), **view, peer=peer,
                               client=ident.user_agent, clientConnection=pinned.connections,
                               otherViewLag=step.asked[1 - pinned.view])
        return step.views[pinned.view], view

    def _choose(self, ident: RequestIdentity, decision: Decision, step: ServeStale, view: dict[str, object]
                ) -> tuple[Choice, dict[str, object]] | None:
        """The past revision to serve and what was asked; None (journaled why) if none is old enough."""
        key: Key = (ident.group, ident.resource)
        now = self.clock()
        asked: dict[str, object]
        if step.lag_writes is not None:
            choice: Choice | str = self.log.choose_writes(key, step.lag_writes, now)
            asked = {"lagWrites": step.lag_writes}
        else:
            assert step.lag_seconds is not None
            choice = self.log.choose_seconds(key, step.lag_seconds, now)
            asked = {"lagSeconds": step.lag_seconds}
        if isinstance(choice, str):
            self.counters.note("stale-skipped", **decision.stamp(), request=ident.as_dict(), asked=asked,
                               reason=choice, **view)
            return None
        return choice, asked

    @staticmethod
    def _outcome(choice: Choice, asked: dict[str, object]) -> dict[str, Any]:
        return {
            "servedResourceVersion": str(choice.revision),
            "seenSecondsAgo": None if choice.seen_seconds_ago is None else round(choice.seen_seconds_ago, 3),
            "writesSince": choice.writes_since,
            "newestResourceVersion": str(choice.newest),
            "asked": asked,
        }

    async def serve_watch(self, ident: RequestIdentity, decision: Decision, step: ServeStale, path: str,
                          query: list[tuple[str, str]], get: Get, view: dict[str, object] | None = None
                          ) -> StaleWatch | Reply | None:
        """A WatchList at the chosen past revision: its initial events read with `get` from the LIST at that
        revision (paged) and the watch to send instead; the apiserver's refusal of that LIST (a 410 for a
        compacted revision) as the reply; None (journaled why) when the request should pass unchanged. `view`:
        what the journal says of a `twoViews` view."""
        view = view or {}
        chosen = self._choose(ident, decision, step, view)
        if chosen is None:
            return None
        choice, asked = chosen
        where = {**decision.stamp(), "request": ident.as_dict(), "servedResourceVersion": str(choice.revision),
                 **view}
        lines: list[bytes] = []
        token: str | None = None
        pages = 0
        while True:
            status, ctype, body = await get(f"{path}?{urlencode(page_query(query, choice.revision, token))}")
            pages += 1
            if status != 200:
                self.counters.note("stale-compacted" if status == 410 else "stale-refused", **where, status=status)
                return Reply(status, body, (("Content-Type", ctype or "application/json"),))
            page = initial_events(body)
            if page is None:
                self.counters.note("stale-unreadable", **where, contentType=ctype)
                return None
            events, kind, api_version, token = page
            lines += events
            if token is None:
                break
        lines.append(initial_events_end(kind, api_version, choice.revision))
        self.counters.performed(decision, ident, action="serve the initial events from the revision, then watch "
                                "from it", **self._outcome(choice, asked), servedAs="watchlist",
                                initialEvents=len(lines) - 1, pages=pages, **view)
        return StaleWatch(f"{path}?{urlencode(stale_watch_query(query, choice.revision))}", b"".join(lines))

    def serve(self, ident: RequestIdentity, decision: Decision, step: ServeStale, path: str,
              query: list[tuple[str, str]], view: dict[str, object] | None = None) -> Served | None:
        """The request at the chosen past revision, journaled; None (journaled why) if none is old enough.
        `view`: what the journal says of a `twoViews` view."""
        view = view or {}
        chosen = self._choose(ident, decision, step, view)
        if chosen is None:
            return None
        choice, asked = chosen
        as_get = ident.verb == "get"
        if as_get:  # the answer is read back into the object: JSON, whatever the client accepts
            served = Served(get_as_list(path, ident.name, choice.revision), "application/json", choice.revision,
                            True, {**decision.stamp(), **view})
        else:
            pairs = stale_query(query, choice.revision)
            served = Served(f"{path}?{urlencode(pairs)}", None, choice.revision, False, {**decision.stamp(), **view})
        outcome = self._outcome(choice, asked)
        if as_get:
            outcome["servedAs"] = "list"
        action = f"{step.describe()}, then forward" if view else decision.plan.describe()
        self.counters.performed(decision, ident, action=action, **outcome, **view)
        return served

    def answered(self, ident: RequestIdentity, answer: Answer, served: Served | None) -> Reply | None:
        """A non-watch request's answer: for a stale one, its outcome (a GET's object, to send instead);
        for any other, its revision noted."""
        if served is not None:
            return self._stale_answer(ident, answer, served)
        if not ident.is_resource or not 200 <= answer.status < 300:
            return None
        write = ident.verb in WRITES
        revision = None
        body = answer.body if write or ident.verb in READS else None
        if body and answer.gzip:  # a large LIST's answer, its revision in its first bytes: only those decoded
            head = gzip_head(body, HEAD)
            if head:
                revision = first_revision(head) if answer.json else proto_revision(head, cut=True)
        elif body and not answer.encoded:
            revision = first_revision(body) if answer.json else proto_revision(body)
        key: Key = (ident.group, ident.resource)
        if revision is not None:
            self.log.seen(key, revision, self.clock(), write)
        elif write:  # committed all the same (a DELETE's or a Binding's Status)
            self.log.unrevisioned(key, self.clock())
        return None

    def answered_late(self, ident: RequestIdentity, status: int, content_type: str, body: bytes) -> None:
        """A write the proxy sent itself (a late commit): its answer noted as any other (the log counts it)."""
        self.answered(ident, Answer(status, content_type, "", body), None)

    def _stale_answer(self, ident: RequestIdentity, answer: Answer, served: Served) -> Reply | None:
        where = {**served.stamp, "request": ident.as_dict(), "servedResourceVersion": str(served.revision)}
        if answer.status != 200:
            # Passed on as the apiserver wrote it: 410 Expired when etcd compacted that revision already.
            self.counters.note("stale-compacted" if answer.status == 410 else "stale-refused", **where,
                               status=answer.status)
            return None
        if not served.as_get:
            return None
        reply = single_object(ident, answer.body or b"") if answer.json else None
        if reply is None:
            self.counters.note("stale-unreadable", **where, contentType=answer.content_type)
        elif reply.status == 404:
            self.counters.note("stale-not-found", **where)
        return reply

    def watch(self, ident: RequestIdentity, answer: Answer, inner: Chunks | bool,
              editor: object = None) -> Chunks | None:
        """The stream callable that notes a watch's event revisions (JSON or protobuf; gzip-encoded too, read from
        a decoded copy), then does what `inner` did (another fault's editor, or plain streaming), offering a JSON
        watch's events to watches that wait for them (`editor`: this watch's own, never released by it); None for
        a watch it cannot read."""
        scanner_type = WATCH_SCANNERS.get(answer.media_type)
        if answer.status != 200 or (answer.encoded and not answer.gzip) or scanner_type is None:
            return None
        decoder = GzipMembers() if answer.gzip else None
        reported = False  # the decoder's failure journaled (once: the stream passes on, unread from there)
        key: Key = (ident.group, ident.resource)
        log, clock = self.log, self.clock

        def report(revision: int, write: bool) -> None:
            log.seen(key, revision, clock(), write, from_watch=True)

        scanner = scanner_type(report)
        signals, lines, offers = self.signals, LineReader(), scanner_type is WatchScanner

        def chunk(data: bytes) -> Iterable[bytes] | bytes:
            nonlocal reported
            if data and data is not TICK:  # a tick is the proxy's, not the apiserver's
                plain = data if decoder is None else decoder.feed(data)
                if decoder is not None and decoder.failed is not None and not reported:
                    reported = True
                    self.counters.note("watch-undecodable", request=ident.as_dict(), error=decoder.failed)
                scanner.feed(plain)
                if offers and signals.watching(key):  # another watch waits for an event of this resource
                    for event in lines.feed(plain):
                        signals.offer(key, event, editor)
                else:
                    lines.reset()
            if callable(inner):
                return inner(data)
            return [data] if data else []

        return chunk
