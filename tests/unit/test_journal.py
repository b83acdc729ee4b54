"""A torn last line (power loss) never glues the next record onto it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kube_fault_proxy.proxy.journal import Journal, repair_torn_tail

R1 = b'{"seq":1,"time":1.0,"event":"activate"}\n'
R2 = b'{"seq":2,"time":1.0,"event":"inject"}'


@pytest.mark.parametrize(
    ("content", "cut", "seq_after"),
    [
        (R1 + R2 + b"\n", 0, 3),
        (R1 + R2[:17], 17, 2),  # a record cut mid-way: the fragment goes
        (R1 + R2, 0, 3),  # a whole record lost only its newline: it stays
        (R2[:10], 10, 1),  # nothing but a fragment
        (R1 + b"x" * 200_000, 200_000, 2),  # a fragment longer than one read block
        (b"", 0, 1),
    ],
    ids=["clean", "torn-record", "missing-newline", "only-fragment", "long-fragment", "empty"],
)
def test_the_next_record_starts_its_own_line(tmp_path: Path, content: bytes, cut: int, seq_after: int) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(content)
    journal = Journal(path, wall=lambda: 2.0)
    assert journal.torn_bytes == cut
    assert journal.append("proxy-start")["seq"] == seq_after
    journal.close()
    records = [json.loads(line) for line in path.read_bytes().splitlines()]  # every line is a record
    assert records[-1]["event"] == "proxy-start"


def test_repair_of_a_missing_file_is_nothing(tmp_path: Path) -> None:
    assert repair_torn_tail(tmp_path / "none.jsonl") == 0


@pytest.mark.parametrize("before", [None, 0o644, 0o600], ids=["new", "world-readable", "private"])
def test_the_journal_file_is_0600(tmp_path: Path, before: int | None) -> None:
    path = tmp_path / "j.jsonl"
    if before is not None:
        path.write_bytes(R1)
        path.chmod(before)
    journal = Journal(path, wall=lambda: 2.0)
    journal.append("proxy-start")
    journal.close()
    assert path.stat().st_mode & 0o777 == 0o600
    assert json.loads(path.read_bytes().splitlines()[-1])["event"] == "proxy-start"
