"""What `serve` writes about its traffic and itself is for its owner only: journal and ready file 0600."""

from __future__ import annotations

import pytest

from tests.support.processes import Started

# The journal holds request paths, object names and user agents; the ready file says where it all is.
FILES = ["journal.jsonl", "proxy.json"]


@pytest.mark.parametrize("name", FILES)
def test_serve_creates_its_files_0600(proxy: Started, name: str) -> None:
    path = proxy.log.parent / name
    assert path.stat().st_size > 0
    assert path.stat().st_mode & 0o777 == 0o600, oct(path.stat().st_mode)


def test_the_journal_checked_is_the_one_serve_writes(proxy: Started) -> None:
    assert proxy.ready["journal"] == str(proxy.log.parent / "journal.jsonl")
