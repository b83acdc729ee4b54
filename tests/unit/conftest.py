"""Fixtures shared by the unit tests."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kube_fault_proxy.proxy.journal import Journal
from kube_fault_proxy.proxy.profiles.library import Library, load_dir
from kube_fault_proxy.proxy.runtime import Runtime

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def runtime(tmp_path: Path) -> Runtime:
    """A runtime over the shipped profile library, journaling to a temporary file (a test file may override it)."""
    return Runtime(Library(load_dir(ROOT / "fault_profiles")), Journal(tmp_path / "j.jsonl", time.time),
                   time.monotonic, time.time)
