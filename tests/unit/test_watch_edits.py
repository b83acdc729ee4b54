"""Watch edits (proxy.mitm.watch_edits): whole events through the editor, each edit noted; and the addon that reads
the edit from the decision in its own hooks."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from kube_fault_proxy.proxy.engine import Decision
from kube_fault_proxy.proxy.faults.plan import EditEvents, LimitWatch, Plan
from kube_fault_proxy.proxy.mitm import flow_keys, watch_edits
from kube_fault_proxy.proxy.requests.identity import parse
from kube_fault_proxy.proxy.requests.watch import EventEditor, WatchEvent
from kube_fault_proxy.proxy.watch_signals import WatchSignals
from mitmproxy import http

from tests.support.mitm import answer, flow

DECISION = Decision(profile="p", epoch=3, seed=7, rule="r", fault="dropEvents", plan=Plan(), match=1, injection=1)


def line(kind: str, name: str) -> bytes:
    obj = {"kind": "Pod", "metadata": {"name": name, "namespace": "default"}}
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


class DropModified(EventEditor):
    """Drops MODIFIED events, appends a marker at the end, cuts after a DELETED one."""

    def describe(self) -> str:
        return "drop MODIFIED"

    def edit(self, data: bytes, event: WatchEvent | None) -> list[bytes]:
        if event is not None and event.type == "MODIFIED":
            self.note("dropped", event)
            return []
        if event is not None and event.type == "DELETED":
            self.cut_connection = True
        return [data]

    def at_end(self) -> list[bytes]:
        return [b"END\n"]


class Broken(EventEditor):
    def edit(self, data: bytes, event: WatchEvent | None) -> list[bytes]:
        raise RuntimeError("bug")


@pytest.mark.parametrize(("content_type", "encoding", "expected"), [
    ("application/json", "", True),
    ("application/json;stream=watch", "", True),
    ("application/json; charset=utf-8", "", True),
    ("application/vnd.kubernetes.protobuf;stream=watch", "", False),
    ("application/json", "gzip", False),
    ("", "", False),
])
def test_only_plain_json_is_editable(content_type: str, encoding: str, expected: bool) -> None:
    assert watch_edits.editable(content_type, encoding) is expected


def edited(editor: EventEditor, notes: list[tuple[str, dict[str, Any]]], cuts: list[int]) -> watch_edits.Chunks:
    return watch_edits.edited(editor, DECISION, "stream-1", lambda event, **f: notes.append((event, f)),
                              lambda: cuts.append(1))


def test_events_split_across_chunks_are_edited_whole_and_noted() -> None:
    notes: list[tuple[str, dict[str, Any]]] = []
    chunk = edited(DropModified(), notes, [])
    data = line("ADDED", "a") + line("MODIFIED", "b") + line("ADDED", "c")
    out = [piece for i in range(0, len(data), 7) for piece in chunk(data[i:i + 7])]
    assert b"".join(out) == line("ADDED", "a") + line("ADDED", "c")
    assert chunk(b"") == [b"END\n"], "the end of the stream: the editor's tail"
    [(event, fields)] = notes
    assert event == "watch-event"
    assert {k: fields[k] for k in ("rule", "epoch", "seed", "stream", "action", "type", "name")} == {
        "rule": "r", "epoch": 3, "seed": 7, "stream": "stream-1", "action": "dropped", "type": "MODIFIED", "name": "b"}


def test_a_cut_runs_on_the_loop_just_after_the_chunk() -> None:
    cuts: list[int] = []

    async def main() -> None:
        chunk = edited(DropModified(), [], cuts)
        assert chunk(line("DELETED", "a")) == [line("DELETED", "a")]
        assert cuts == [], "not from inside mitmproxy's stream callback"
        await asyncio.sleep(0)
        assert cuts == [1]
        chunk(line("ADDED", "b"))
        await asyncio.sleep(0)
        assert cuts == [1], "once"

    asyncio.run(main())


def test_an_editor_that_fails_passes_the_chunk_through(caplog: pytest.LogCaptureFixture) -> None:
    chunk = edited(Broken(), [], [])
    with caplog.at_level(logging.ERROR):
        assert chunk(line("ADDED", "a")) == [line("ADDED", "a")]
    assert "watch edit failed" in caplog.text


@pytest.mark.parametrize(("accept", "expected"), [
    ("application/vnd.kubernetes.protobuf, */*", "application/json"),  # client-go's protobuf clients
    ("application/vnd.kubernetes.protobuf,application/json", "application/json"),
    ("application/json", "application/json"),
    ("application/json;as=Table;v=v1;g=meta.k8s.io, application/json", "application/json"),
    ("", ""),  # nothing asked: the apiserver answers JSON, nothing to change
    ("application/vnd.kubernetes.protobuf", None),  # protobuf only: the client is left as it asked
    ("application/vnd.kubernetes.protobuf;stream=watch", None),
])
def test_an_edited_watch_is_asked_for_in_json_only_where_the_client_accepts_json(accept: str,
                                                                                 expected: str | None) -> None:
    assert watch_edits.json_accept(accept) == expected


# The addon (WatchEdits): it reads EditEvents from the decision the fault addon stamped, in its own hooks.
class Listening(DropModified):
    """Remembers the signals it was handed (a held watch waits on them)."""

    signals: object = None

    def listen(self, signals: Any) -> None:
        self.signals = signals


def stamped(editor: EventEditor | None, accept: bytes = b"application/vnd.kubernetes.protobuf, */*",
            encoding: bytes | None = b"gzip") -> http.HTTPFlow:
    """A pods watch the fault addon decided, with `editor` in its plan (None: a plan without EditEvents)."""
    headers = [(b"accept", accept)] + ([(b"accept-encoding", encoding)] if encoding is not None else [])
    f = flow("GET", "/api/v1/pods?watch=1", headers=headers)
    steps = (LimitWatch(5), EditEvents(editor)) if editor is not None else (LimitWatch(5),)
    f.metadata[flow_keys.IDENT] = parse("GET", "/api/v1/pods", "watch=1")
    f.metadata[flow_keys.DECISION] = replace(DECISION, plan=Plan(before=steps))
    return f


class Activations:
    """What the addon asks of the activations: the one active (its engine's epoch), and who hears one end."""

    def __init__(self, epoch: int | None = DECISION.epoch) -> None:
        self.active = None if epoch is None else SimpleNamespace(engine=SimpleNamespace(epoch=epoch))
        self.on_end: list[Callable[[int], None]] = []


def addon(activations: Activations | None = None) -> tuple[watch_edits.WatchEdits, WatchSignals,
                                                           list[tuple[str, dict[str, Any]]]]:
    notes: list[tuple[str, dict[str, Any]]] = []
    signals = WatchSignals()
    return watch_edits.WatchEdits(lambda event, **f: notes.append((event, f)), signals,
                                  activations or Activations()), signals, notes  # type: ignore[arg-type]


def test_the_addon_stamps_the_editor_and_asks_for_a_plain_json_watch_journaled() -> None:
    edits, _, notes = addon()
    editor = DropModified()
    f = stamped(editor)
    edits.request(f)
    assert f.metadata[flow_keys.EDITOR] is editor, "the stale views read it: a held watch's own events never release it"
    assert f.request.headers["accept"] == "application/json" and "accept-encoding" not in f.request.headers
    assert [(event, fields.get("accept"), fields.get("acceptEncoding")) for event, fields in notes] == [
        ("watch-as-json", "application/vnd.kubernetes.protobuf, */*", None), ("watch-uncompressed", None, "gzip")]
    assert notes[0][1]["rule"] == "r" and notes[0][1]["request"]["resource"] == "pods"


def test_the_addon_leaves_a_watch_without_edits_or_already_answered_alone() -> None:
    edits, _, notes = addon()
    plain = stamped(None)
    edits.request(plain)
    answered = stamped(DropModified())
    answered.response = answer(410)
    edits.request(answered)
    for f in (plain, answered):
        assert flow_keys.EDITOR not in f.metadata and f.request.headers["accept-encoding"] == "gzip"
    assert notes == []


def test_the_addon_streams_an_edited_watch_through_its_editor_which_listens_to_the_shared_signals() -> None:
    edits, signals, notes = addon()
    editor = Listening()
    f = stamped(editor, b"application/json", None)
    edits.request(f)
    f.response = answer(200, b"", [(b"content-type", b"application/json;stream=watch")])
    f.response.stream = True
    edits.responseheaders(f)
    assert editor.signals is signals
    assert f.response is not None and callable(f.response.stream)
    assert f.response.stream(line("ADDED", "a") + line("MODIFIED", "a")) == [line("ADDED", "a")]
    assert [(event, fields["action"]) for event, fields in notes] == [("watch-event", "dropped")]


@pytest.mark.parametrize(("status", "content_type", "noted"), [
    (200, b"application/vnd.kubernetes.protobuf;stream=watch", True),  # the editor cannot read it: journaled
    (410, b"application/json", False),  # the apiserver's refusal: nothing to edit
])
def test_the_addon_leaves_a_watch_its_editor_cannot_read(status: int, content_type: bytes, noted: bool) -> None:
    edits, _, notes = addon()
    f = stamped(DropModified(), b"application/vnd.kubernetes.protobuf", None)
    edits.request(f)
    f.response = answer(status, b"", [(b"content-type", content_type)])
    f.response.stream = True
    edits.responseheaders(f)
    assert f.response.stream is True
    assert [event for event, _ in notes] == (["watch-unparsable"] if noted else [])


class Holding(EventEditor):
    """Keeps every event back until the stream ends (a hold with no limit)."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[bytes] = []

    def edit(self, line: bytes, event: WatchEvent | None) -> list[bytes]:
        self.held.append(line)
        return []

    def release(self) -> list[bytes]:
        self.records.append({"action": "held", "reason": "deactivated", "events": len(self.held)})
        out, self.held = self.held, []
        return out


def test_once_the_activation_is_over_the_editor_releases_and_the_rest_passes_as_sent() -> None:
    """A profile switched off ends the edits of the watches it opened: what an editor keeps back is sent, then the
    stream is the apiserver's (an edit never outlives its fault)."""
    notes: list[tuple[str, dict[str, Any]]] = []
    over = [False]
    editor = Holding()
    chunk = watch_edits.edited(editor, DECISION, "stream-1", lambda event, **f: notes.append((event, f)),
                               lambda: None, over=lambda: over[0])
    a, b, c = (json.dumps({"type": "ADDED", "object": {"kind": "Pod", "metadata": {"name": n}}}).encode() + b"\n"
               for n in "abc")
    assert chunk(a + b[:10]) == []  # a held, part of b buffered
    over[0] = True
    assert chunk(b[10:] + c) == [a, b[:10], b[10:] + c]  # released, the part line, then the chunk as sent
    assert chunk(watch_edits.TICK) == [] and chunk(c) == [c] and chunk(b"") == []
    assert [e for e, _ in notes] == ["watch-event", "watch-edits-end"]
    assert notes[0][1]["reason"] == "deactivated" and notes[1][1]["released"] == 1 and notes[1][1]["epoch"] == 3


def test_while_its_activation_lasts_the_editor_keeps_editing() -> None:
    editor = Holding()
    chunk = watch_edits.edited(editor, DECISION, "stream-1", lambda event, **f: None, lambda: None,
                               over=lambda: False)
    line = b'{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a"}}}\n'
    assert chunk(line) == [] and chunk(line) == [] and len(editor.held) == 2


def test_an_activation_ending_wakes_only_the_watches_it_edited() -> None:
    acts = Activations()
    edits, _, _ = addon(acts)
    woken: list[str] = []
    edits.live = {"w3": (3, lambda: woken.append("w3") or True), "w4": (4, lambda: woken.append("w4") or True)}
    assert acts.on_end == [edits._activation_over]
    acts.active = None
    for listener in acts.on_end:
        listener(3)
    assert woken == ["w3"] and list(edits.live) == ["w4"]
    assert edits._over(3) and edits._over(4)  # nothing active: every edit is over
    acts.active = SimpleNamespace(engine=SimpleNamespace(epoch=4))
    assert edits._over(3) and not edits._over(4)
