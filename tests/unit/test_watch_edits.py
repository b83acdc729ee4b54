"""Watch-stream editing (proxy.mitm.watch_edits): whole events through the editor, each edit noted."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from kube_fault_proxy.proxy.engine import Decision
from kube_fault_proxy.proxy.faults.plan import Plan
from kube_fault_proxy.proxy.mitm import watch_edits
from kube_fault_proxy.proxy.requests.watch import EventEditor, WatchEvent

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
