"""cli.serve: what the serve command does to its own process once the proxy is up."""

from __future__ import annotations

import gc
import weakref

from kube_fault_proxy.cli import serve


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_startup_objects_are_frozen_out_of_the_collectors_scans_and_garbage_is_not() -> None:
    gc.unfreeze()
    kept = Node()  # built at startup and still in use: frozen
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle nothing refers to any more: collected, not frozen
    gone = weakref.ref(a)
    del a, b
    try:
        serve._freeze_startup_objects()
        assert gone() is None
        assert gc.get_freeze_count() > 0
        assert not any(o is kept for o in gc.get_objects())  # out of every generation the collector scans
    finally:
        gc.unfreeze()
    assert any(o is kept for o in gc.get_objects())
