"""`paths.write_private`: 0600 from the first byte, and whole or not at all."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from kube_fault_proxy import paths


def test_a_private_file_is_0600_and_replaces_the_old_one_whole(tmp_path: Path) -> None:
    f = tmp_path / "cluster.json"
    f.write_text("old")
    f.chmod(0o644)
    paths.write_private(f, '{"new": true}')
    assert f.read_text() == '{"new": true}' and stat.S_IMODE(f.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["cluster.json"]  # no temporary file left


def test_an_interrupted_write_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "cluster.json"
    paths.write_private(f, '{"old": true}')

    def interrupted(*args: object) -> None:  # Ctrl-C between the bytes and the rename
        raise KeyboardInterrupt

    monkeypatch.setattr(paths.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        paths.write_private(f, '{"new": true}')
    assert f.read_text() == '{"old": true}'
    assert [p.name for p in tmp_path.iterdir()] == ["cluster.json"]
