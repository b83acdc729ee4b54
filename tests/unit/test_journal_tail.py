"""The timeline's read of the proxy's journal: the file's new records, whole lines only; else the control plane."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kube_fault_proxy.rig.runs import journal_tail
from kube_fault_proxy.rig.runs.journal_tail import JournalTail


def line(**record: Any) -> bytes:
    return json.dumps(record).encode() + b"\n"


def test_the_file_gives_the_records_written_since_the_last_read(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(line(seq=1, event="activate"))  # before the run: not read
    tail = JournalTail("http://control", 0, path)
    assert tail.read() == []
    inject = line(seq=2, time=5.0, event="inject", rule="mark")
    with path.open("ab") as f:
        f.write(inject + inject[:-9])  # the next record only half written
    assert tail.read() == [{"seq": 2, "time": 5.0, "event": "inject", "rule": "mark"}]
    with path.open("ab") as f:
        f.write(inject[-9:] + b"not json\n" + line(seq=3, event="outage-start"))
    assert [r["seq"] for r in tail.read()] == [2, 3]  # the torn one whole now; a line that is no record skipped
    assert tail.read() == []


def test_a_new_file_is_read_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(line(seq=1, event="activate") * 3)
    tail = JournalTail("http://control", 0, path)
    path.write_bytes(line(seq=1, event="proxy-start"))  # shorter than what was read: the proxy started anew
    assert tail.read() == [{"seq": 1, "event": "proxy-start"}]
    path.unlink()
    assert tail.read() == []  # gone for now: nothing, no error


def test_without_a_file_the_control_plane_is_asked_after_the_cursor(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []

    class Control:
        def __init__(self, url: str) -> None:
            assert url == "http://control"

        def __enter__(self) -> Control:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def journal_after(self, cursor: int) -> SimpleNamespace:
            asked.append(cursor)
            return SimpleNamespace(next=cursor + 2, records=[{"seq": cursor + 1, "event": "crash-point"},
                                                             {"seq": cursor + 2, "event": "inject"}])

    monkeypatch.setattr(journal_tail, "ControlClient", Control)
    tail = JournalTail("http://control", 7)
    assert [r["seq"] for r in tail.read()] == [8, 9]
    assert [r["seq"] for r in tail.read()] == [10, 11] and asked == [7, 9]
