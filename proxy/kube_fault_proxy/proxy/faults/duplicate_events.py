"""duplicateEvents: chosen watch events reach the client twice."""

from __future__ import annotations

from typing import ClassVar

from kube_fault_proxy.proxy.faults.drop_events import DropEditor, DropEvents
from kube_fault_proxy.proxy.faults.traits import Traits


class DuplicateEditor(DropEditor):
    """Sends each selected event twice, with a probability."""

    action = "duplicated"

    def describe(self) -> str:
        return f"duplicate selected events (p={self.probability:g})"

    def act(self, line: bytes) -> list[bytes]:
        return [line, line]


class DuplicateEvents(DropEvents):
    """Events of the watch that match `events` are sent twice with `probability`."""

    kind: ClassVar[str] = "duplicateEvents"
    traits: ClassVar[Traits] = Traits(acts_on="watch", edits_events=True, rule_probability=False)
    editor: ClassVar[type[DropEditor]] = DuplicateEditor
