"""The revision log (proxy.revisions): what the proxy saw pass, per resource, in bounded rings."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from kube_fault_proxy.proxy import revisions
from kube_fault_proxy.proxy.counters import Counters
from kube_fault_proxy.proxy.journal import Journal
from kube_fault_proxy.proxy.protobuf import PROTOBUF_MAGIC
from kube_fault_proxy.proxy.requests.identity import parse
from kube_fault_proxy.proxy.revisions import (
    Choice,
    ProtoWatchScanner,
    RevisionLog,
    WatchScanner,
    first_revision,
    proto_revision,
)
from kube_fault_proxy.proxy.stale_views import Answer, StaleViews

PODS = ("", "pods")
CMS = ("", "configmaps")
NODES = ("", "nodes")


def pod(name: str, rv: int, event_type: str | None = None, **extra: object) -> bytes:
    obj = {"kind": "Pod", "apiVersion": "v1",
           "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "resourceVersion": str(rv),
                        "labels": {"resourceVersion": "1"}}, "spec": {"nodeName": "n1"}, **extra}
    doc = obj if event_type is None else {"type": event_type, "object": obj}
    return json.dumps(doc, separators=(",", ":")).encode() + (b"\n" if event_type else b"")


@pytest.mark.parametrize(("body", "expected"), [
    (pod("a", 42), 42),
    (b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"977"},"items":[' + pod("a", 3) + b"]}", 977),
    (b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","code":201}', None),
    (b'{"metadata":{"resourceVersion":""}}', None),
    (b'{"metadata":{"resourceVersion":"12', None),  # cut before its closing quote
    (b" " * revisions.HEAD + pod("a", 5), None),  # too far in to be the object's own
])
def test_first_revision_is_the_objects_own(body: bytes, expected: int | None) -> None:
    assert first_revision(body) == expected


PROTOBUF = Path(__file__).with_name("data") / "protobuf"  # answers of kube-apiserver v1.36.3, Accept protobuf


@pytest.mark.parametrize(("name", "expected"), [
    ("create-configmap", 3656),  # a POST's answer: the object, ObjectMeta.resourceVersion (field 6)
    ("list-nodes", 3656),  # a LIST's: ListMeta.resourceVersion (field 2)
    ("delete-configmap", None),  # a DELETE's Status: no revision
    ("notfound", None),  # a 404's Status
])
def test_a_protobuf_answers_revision_is_read_from_its_metadata(name: str, expected: int | None) -> None:
    body = (PROTOBUF / f"{name}.pb").read_bytes()
    assert proto_revision(body) == expected
    assert first_revision(body) is None  # no JSON in it


@pytest.mark.parametrize("body", [
    b"", b"k8s\x00", b"k8s\x00\x12\x05ab", b"k8s\x00\x12\x80", b"{\"kind\":\"Pod\"}", b"k8s\x00\x0b\x01\x02",
    b"k8s\x00\x12\x06\x0a\x04\x32\x02x1",  # a resourceVersion that is not digits
])
def test_bytes_that_are_not_such_an_answer_give_no_revision(body: bytes) -> None:
    assert proto_revision(body) is None


def test_every_cut_of_a_protobuf_answer_gives_its_revision_or_none() -> None:
    body = (PROTOBUF / "create-configmap.pb").read_bytes()
    assert {proto_revision(body[:n]) for n in range(len(body))} <= {None, 3656}


def test_lag_seconds_picks_the_newest_revision_seen_at_least_that_long_ago() -> None:
    log = RevisionLog()
    for t, rv in ((100.0, 10), (101.0, 11), (102.0, 15), (103.0, 20)):
        log.seen(PODS, rv, t, write=True)
    assert log.choose_seconds(PODS, 1.5, 103.0) == Choice(revision=11, seen_seconds_ago=2.0, writes_since=2, newest=20)
    assert log.choose_seconds(PODS, 1.0, 103.0) == Choice(15, 1.0, 1, 20)
    assert log.choose_seconds(PODS, 0.001, 103.0) == Choice(15, 1.0, 1, 20)  # 20 was seen just now: not old enough
    too_far = log.choose_seconds(PODS, 5, 103.0)
    assert isinstance(too_far, str) and "no revision of pods seen 5s ago or earlier" in too_far
    assert "oldest kept was seen 3.0s ago" in too_far
    assert log.choose_seconds(NODES, 1, 103.0) == "no revision of nodes seen yet"


def test_one_entry_per_bucket_holds_its_newest_revision_and_revisions_never_go_back() -> None:
    log = RevisionLog()
    log.seen(PODS, 10, 100.0, write=False)
    log.seen(PODS, 12, 100.1, write=False)  # the same quarter second: replaces, seen later
    log.seen(PODS, 11, 100.2, write=False)  # older than what was seen: nothing new to learn
    log.seen(PODS, 13, 100.3, write=False)  # a new bucket
    assert log.sizes() == {"pods": 2}
    assert log.choose_seconds(PODS, 0.15, 100.3) == Choice(12, pytest.approx(0.2), 0, 13)  # type: ignore[arg-type]


def test_lag_writes_hides_the_last_n_writes_deduplicated_and_in_order() -> None:
    log = RevisionLog()
    for t, rv in enumerate((5, 7, 9, 7, 12, 8)):  # 7 twice (a create's answer and its ADDED event), 8 late
        log.seen(PODS, rv, 100.0 + t, write=True)
    log.seen(PODS, 30, 110.0, write=False)  # a LIST's revision: newer, but no write of pods
    got = log.choose_writes(PODS, 2, 110.0)
    assert isinstance(got, Choice)
    assert (got.revision, got.writes_since, got.newest) == (8, 2, 30)  # writes 5 7 8 9 12: 9 and 12 hidden
    assert got.seen_seconds_ago is None  # 8 came after 9 was seen: never the newest
    assert log.choose_writes(PODS, 4, 110.0) == Choice(6, None, 4, 30)  # just before 7
    assert log.choose_writes(PODS, 5, 110.0) == Choice(4, None, 5, 30)
    assert log.choose_writes(PODS, 6, 110.0) == "5 writes of pods seen, 6 needed to hide 6"
    assert log.choose_writes(("apps", "deployments"), 1, 110.0) == "0 writes of deployments.apps seen, 1 needed to hide 1"


def test_a_write_answered_without_a_revision_counts_so_hide_n_hides_exactly_n() -> None:
    """The issue's reproduction: early, doomed and late created, doomed deleted (a Status, no revision)."""
    log = RevisionLog()
    for t, rv in enumerate((10, 11, 12)):  # early, doomed, late: their answers carry their revisions
        log.seen(CMS, rv, 100.0 + t, write=True)
    log.unrevisioned(CMS, 104.0)  # doomed's DELETE, answered with a Status
    got = log.choose_writes(CMS, 2, 105.0)
    assert isinstance(got, Choice) and (got.revision, got.writes_since) == (11, 2), "late's create and the delete hidden"
    hide1 = log.choose_writes(CMS, 1, 105.0)
    assert isinstance(hide1, Choice) and (hide1.revision, hide1.writes_since) == (12, 1), "only the delete hidden"


def test_binds_answered_before_their_events_hide_writes_after_the_newest_revision_seen() -> None:
    """Three Bindings answered (a Status each) before their events: the revision served is the newest seen,
    and it hides the three (CI's run of 17c481a: served 271, newest 271, writesSince 3)."""
    log = RevisionLog()
    for t, rv in enumerate((269, 270, 271)):
        log.seen(PODS, rv, 100.0 + t, write=True)
    for t in range(3):
        log.unrevisioned(PODS, 103.0 + t / 10)
    assert log.choose_writes(PODS, 3, 104.0) == Choice(271, 2.0, 3, 271)
    log.seen(PODS, 272, 104.1, write=True, from_watch=True)  # the first bind's event brings its revision
    got = log.choose_writes(PODS, 3, 104.2)
    assert isinstance(got, Choice) and (got.revision, got.writes_since, got.newest) == (271, 3, 272)


@pytest.mark.parametrize("event_first", [False, True])
def test_an_answer_without_a_revision_and_its_watch_event_are_one_write(event_first: bool) -> None:
    log = RevisionLog()
    log.seen(CMS, 10, 100.0, write=True)
    if event_first:
        log.seen(CMS, 13, 100.1, write=True, from_watch=True)  # the DELETED event
        log.unrevisioned(CMS, 100.2)  # then the DELETE's Status: the same write
    else:
        log.unrevisioned(CMS, 100.1)
        log.seen(CMS, 13, 100.2, write=True, from_watch=True)  # the event gives it its revision
    assert log.choose_writes(CMS, 3, 101.0) == "2 writes of configmaps seen, 3 needed to hide 3"
    assert log.choose_writes(CMS, 1, 101.0) == Choice(12, None, 1, 13)
    assert log.choose_writes(CMS, 2, 101.0) == Choice(9, None, 2, 13)


def test_an_answer_and_an_event_further_apart_than_the_pairing_window_are_two_writes() -> None:
    log = RevisionLog()
    log.seen(CMS, 10, 100.0, write=True)
    log.seen(CMS, 13, 100.0, write=True, from_watch=True)  # another client's write, seen by a watch only
    log.unrevisioned(CMS, 100.0 + revisions.PAIR_SECONDS + 1)  # a Status much later: a write of its own
    assert log.choose_writes(CMS, 1, 104.0) == Choice(13, 4.0, 1, 13)  # 13 was the newest, 4 s ago
    assert log.choose_writes(CMS, 2, 104.0) == Choice(12, None, 2, 13)
    log.seen(CMS, 14, 104.0, write=True)  # an exact answer is never paired
    assert log.choose_writes(CMS, 3, 104.0) == Choice(12, None, 3, 14)


def test_a_watch_event_answered_later_with_its_revision_counts_once() -> None:
    log = RevisionLog()
    log.seen(CMS, 20, 100.0, write=True, from_watch=True)
    log.seen(CMS, 20, 100.1, write=True)  # the create's own answer
    log.unrevisioned(CMS, 100.2)  # another write, answered with a Status: not paired with 20
    assert log.choose_writes(CMS, 2, 101.0) == Choice(19, None, 2, 20)


def test_memory_is_bounded_per_resource_and_in_resources() -> None:
    log = RevisionLog()
    for i in range(10_000):
        log.seen(PODS, i + 1, i * 1.0, write=True)
    assert log.sizes()["pods"] == revisions.SEEN_KEPT + revisions.WRITES_KEPT
    assert log.choose_writes(PODS, 1000, 1e4) == Choice(9000, pytest.approx(1001.0), 1000, 10_000)  # type: ignore[arg-type]
    assert log.choose_writes(PODS, 1001, 1e4) == Choice(8999, pytest.approx(1002.0), 1001, 10_000)  # type: ignore[arg-type]
    log.seen(PODS, 3, 1e4, write=True)  # older than every write kept: dropped, not inserted
    assert log.sizes()["pods"] == revisions.SEEN_KEPT + revisions.WRITES_KEPT
    for i in range(revisions.MAX_RESOURCES + 5):
        log.seen(("g", f"r{i}"), 1, 0.0, write=False)
    assert len(log.sizes()) == revisions.MAX_RESOURCES and log.untracked == 6


STREAM = (pod("a", 101, "ADDED") + pod("a", 102, "MODIFIED", status={"phase": "Running"})
          + b'{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"150",'
            b'"annotations":{"k8s.io/initial-events-end":"true"}}}}\n'
          + pod("b", 151, "DELETED", involvedObject={"resourceVersion": "7"})
          + b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"code":410}}\n')
EXPECTED = [(101, True), (102, True), (150, False), (151, True)]


@pytest.mark.parametrize("size", [1, 3, 19, 64, 500, len(STREAM)])
def test_the_watch_scanner_reports_each_events_own_revision_whatever_the_chunks(size: int) -> None:
    got: list[tuple[int, bool]] = []
    scanner = WatchScanner(lambda rv, write: got.append((rv, write)))
    for i in range(0, len(STREAM), size):
        scanner.feed(STREAM[i:i + size])
    assert got == EXPECTED


def test_the_watch_scanner_gives_up_on_a_line_without_a_revision_in_its_head() -> None:
    got: list[tuple[int, bool]] = []
    scanner = WatchScanner(lambda rv, write: got.append((rv, write)))
    long_line = b'{"type":"ADDED","object":{"x":"' + b"y" * 5000 + b'","metadata":{"resourceVersion":"9"}}}\n'
    for i in range(0, len(long_line), 1000):
        scanner.feed(long_line[i:i + 1000])
    scanner.feed(pod("a", 10, "ADDED"))
    assert got == [(10, True)]


def test_a_protobuf_clients_writes_are_revisions_the_stale_views_can_serve_from() -> None:
    """A protobuf client (kube-controller-manager creating pods) shows the proxy its writes' revisions: `hide 1`
    serves the revision before the create, and a DELETE's Status counts as one more write after it."""
    views = StaleViews(Counters(Journal(None, lambda: 100.0)), lambda: 100.0)
    pb = "application/vnd.kubernetes.protobuf"
    create = parse("POST", "/api/v1/namespaces/default/configmaps")
    views.answered(create, Answer(201, pb, "", (PROTOBUF / "create-configmap.pb").read_bytes()), None)
    assert views.log.newest(CMS) == 3656
    assert views.log.choose_writes(CMS, 1, 100.0) == Choice(3655, None, 1, 3656)
    delete = parse("DELETE", "/api/v1/namespaces/default/configmaps/kfp-pb-fixture")
    views.answered(delete, Answer(200, pb, "", (PROTOBUF / "delete-configmap.pb").read_bytes()), None)
    assert views.log.choose_writes(CMS, 2, 100.0) == Choice(3655, None, 2, 3656)
    views.answered(create, Answer(201, pb, "gzip", b"\x1f\x8b not gzip"), None)  # unreadable: not read, counted
    assert views.log.choose_writes(CMS, 3, 100.0) == Choice(3655, None, 3, 3656)


# kube-apiserver v1.36.3's protobuf watch of a namespace's pods (Accept `application/vnd.kubernetes.protobuf, */*`,
# sendInitialEvents): p0 and p1 ADDED (247, 248), the initial-events-end BOOKMARK (248), then p2 ADDED (249), p0
# patched (250), p1 deleted (251: its deletionTimestamp; 252: DELETED) and a closing BOOKMARK; each event a frame.
WATCH_PB = (PROTOBUF / "watchlist-pods.pb").read_bytes()
WATCH_PB_EVENTS = [(247, True), (248, True), (248, False), (249, True), (250, True), (251, True), (252, True),
                   (252, False)]


def _scan_pb(chunks: list[bytes]) -> list[tuple[int, bool]]:
    got: list[tuple[int, bool]] = []
    scanner = ProtoWatchScanner(lambda rv, write: got.append((rv, write)))
    for chunk in chunks:
        scanner.feed(chunk)
    return got


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 7, 1091, 4096, len(WATCH_PB)])
def test_a_protobuf_watchs_events_give_their_objects_revisions_whatever_the_chunks(size: int) -> None:
    assert _scan_pb([WATCH_PB[i:i + size] for i in range(0, len(WATCH_PB), size)]) == WATCH_PB_EVENTS


def test_a_protobuf_watch_split_anywhere_in_its_first_frames_reads_the_same() -> None:
    """Every cut in the first two frames and the bookmark after them: in a length, a head, a tail."""
    for n in range(1, 2400):
        assert _scan_pb([WATCH_PB[:n], WATCH_PB[n:]]) == WATCH_PB_EVENTS, n


def _ld(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (lengths under 2**14 here)."""
    length = len(payload)
    size = bytes([length]) if length < 0x80 else bytes([(length & 0x7F) | 0x80, length >> 7])
    return bytes([(number << 3) | 2]) + size + payload


def _frame(event_type: bytes, obj: bytes) -> bytes:
    event = _ld(1, event_type) + _ld(2, _ld(1, obj))
    return len(event).to_bytes(4, "big") + event


def _pod_pb(meta: bytes, spec_bytes: int = 0) -> bytes:
    unknown = _ld(1, _ld(1, b"v1") + _ld(2, b"Pod")) + _ld(2, _ld(1, meta) + _ld(2, b"s" * spec_bytes))
    return PROTOBUF_MAGIC + unknown


def test_a_protobuf_watchs_large_objects_error_events_and_far_revisions() -> None:
    """A 9 KB pod is read from its frame's head (its revision is in its metadata, first); an ERROR event's Status
    (kube-apiserver's own, a DELETE's) has no revision; a revision beyond the head is not looked for, and the
    frames after each are read in step."""
    error = _frame(b"ERROR", (PROTOBUF / "delete-configmap.pb").read_bytes())
    far = _frame(b"ADDED", _pod_pb(_ld(1, b"n" * 3000) + _ld(6, b"778")))
    stream = (_frame(b"MODIFIED", _pod_pb(_ld(1, b"big") + _ld(6, b"777"), spec_bytes=9000)) + error + far
              + _frame(b"DELETED", _pod_pb(_ld(1, b"p") + _ld(6, b"779"))))
    for size in (1, 13, 700, len(stream)):
        assert _scan_pb([stream[i:i + size] for i in range(0, len(stream), size)]) == [(777, True), (779, True)]


@pytest.mark.parametrize("frame", [
    b"\x00\x00\x00\x00",  # an empty frame
    b"\x00\x00\x00\x03\x0a\x05A",  # a field longer than its frame
    _frame(b"ADDED", b"not the k8s envelope"),
    _frame(b"ADDED", _pod_pb(_ld(6, b"12x"))),  # a revision that is not digits
])
def test_protobuf_frames_that_are_not_such_events_give_nothing_and_keep_the_stream_in_step(frame: bytes) -> None:
    last = _frame(b"ADDED", _pod_pb(_ld(6, b"5")))
    assert _scan_pb([frame + last]) == [(5, True)]


def test_a_protobuf_watch_is_a_revision_source_for_the_stale_views() -> None:
    """YuniKorn's informers watch in protobuf: the pod writes its watch shows are writes a staleList can hide
    (`hide 2` serves the revision before the last two, p1's deletion), the bookmarks are revisions seen, and the
    stream passes as it came."""
    views = StaleViews(Counters(Journal(None, lambda: 100.0)), lambda: 100.0)
    watch = parse("GET", "/api/v1/namespaces/cap/pods", "watch=1&sendInitialEvents=true")
    stream = views.watch(watch, Answer(200, "application/vnd.kubernetes.protobuf;stream=watch", "", None), True)
    assert stream is not None
    passed = [stream(WATCH_PB[i:i + 500]) for i in range(0, len(WATCH_PB), 500)]
    assert b"".join(b"".join(p) for p in passed) == WATCH_PB
    assert views.log.newest(PODS) == 252
    assert views.log.choose_writes(PODS, 2, 100.0) == Choice(250, None, 2, 252)
    encoded = Answer(200, "application/vnd.kubernetes.protobuf;stream=watch", "br", None)
    assert views.watch(watch, encoded, True) is None  # an encoding the apiserver never uses: not read
    assert views.watch(watch, Answer(200, "application/cbor-seq", "", None), True) is None


def test_a_gzipped_watch_list_is_read_from_a_decoded_copy_and_passes_as_it_came() -> None:
    """kube-apiserver 1.37 gzips a WatchList's stream for a client that accepts gzip, a member per flush
    (`WatchListCompression`): the revisions are those of the same stream unencoded, whatever the chunks, and the
    bytes passed on are the apiserver's. Bytes that stop being gzip are journaled once and passed on unread."""
    journal = Journal(None, lambda: 100.0)
    views = StaleViews(Counters(journal), lambda: 100.0)
    watch = parse("GET", "/api/v1/namespaces/cap/pods", "watch=1&sendInitialEvents=true")
    flushes = [WATCH_PB[i:i + 700] for i in range(0, len(WATCH_PB), 700)]  # a flush may end inside a frame
    body = b"".join(gzip.compress(f, mtime=0) for f in flushes)
    stream = views.watch(watch, Answer(200, "application/vnd.kubernetes.protobuf;stream=watch", "gzip", None), True)
    assert stream is not None
    passed = [stream(body[i:i + 333]) for i in range(0, len(body), 333)]
    assert b"".join(b"".join(p) for p in passed) == body
    assert views.log.newest(PODS) == 252
    assert views.log.choose_writes(PODS, 2, 100.0) == Choice(250, None, 2, 252)
    broken = views.watch(watch, Answer(200, "application/json;stream=watch", "gzip", None), True)
    assert broken is not None and broken(b"plain, not gzip") == [b"plain, not gzip"] and broken(b"more") == [b"more"]
    [note] = [r for r in journal.since(0) if r["event"] == "watch-undecodable"]
    assert note["request"]["resource"] == "pods" and note["error"]


def test_a_gzipped_list_answer_gives_its_revision_from_its_first_bytes() -> None:
    """A LIST answer over 128 KiB comes gzipped (Go's transport accepts gzip): its revision is read from the first
    decoded bytes, a list's own (`seen`, not a write)."""
    views = StaleViews(Counters(Journal(None, lambda: 100.0)), lambda: 100.0)
    listed = b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"77"},"items":[' + b" " * 200_000 + b"]}"
    views.answered(parse("GET", "/api/v1/pods"), Answer(200, "application/json", "gzip", gzip.compress(listed)), None)
    assert views.log.newest(PODS) == 77 and views.log.choose_writes(PODS, 1, 100.0) == "0 writes of pods seen, 1 needed to hide 1"
