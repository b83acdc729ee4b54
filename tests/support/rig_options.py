"""The Options a search rig would start its control plane with, captured instead of started."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from kube_fault_proxy.rig.cluster.control_plane import Options
from kube_fault_proxy.rig.search import trial


def captured_options(monkeypatch: pytest.MonkeyPatch) -> list[Options]:
    """From now on in the test, `trial.Rig.running` starts nothing and appends the Options it would start with."""
    seen: list[Options] = []

    @contextlib.contextmanager
    def running(opts: Options) -> Iterator[object]:
        seen.append(opts)
        yield SimpleNamespace()

    monkeypatch.setattr(trial, "running", running)
    return seen
