"""A small watch stream of JSON events, and an event editor run over all of it, for the unit tests."""

from __future__ import annotations

import json

from kube_fault_proxy.proxy.requests.watch import EventStream


def ev(kind: str, name: str, rv: int, node: str | None = None) -> bytes:
    """One watch event line of a Pod in namespace `ns`."""
    obj = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv)},
           "spec": {"nodeName": node} if node else {}}
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


EVENTS = [ev("ADDED", "a", 1), ev("MODIFIED", "a", 2, "n1"), ev("ADDED", "b", 3), ev("DELETED", "a", 4, "n1")]
STREAM = b"".join(EVENTS)


def run_editor(editor: object) -> list[bytes]:
    """Everything an editor lets out of STREAM, its end included."""
    stream = EventStream(editor.edit)  # type: ignore[attr-defined]
    return stream.feed(STREAM) + stream.end() + editor.at_end()  # type: ignore[attr-defined]
