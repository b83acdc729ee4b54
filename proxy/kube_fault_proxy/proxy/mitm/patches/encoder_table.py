"""The hpack encoder's dynamic table searched by key, not by walking it (hpack's HeaderTable.search).

What it replaces: `hpack.hpack.Encoder.__init__` (its table becomes an `IndexedHeaderTable`, which
reproduces `HeaderTable.add`, `search` and `_shrink`). Why: hpack's encoder looks each header it sends up
in its dynamic table by walking every entry (a miss — an `audit-id`, a `:path`, a `date` — walks them
all): 2.7 % of the samples in a YuniKorn wave. Here the encoder's table also keeps, per (name, value) and
per name, its newest entry; a search answers from those (checked against the entry at that index;
anything else walks the table as hpack does) with the same index hpack's walk finds first.

What it bought: part of issue 23's second round (callgrind, Binding POSTs one at a time: 5.62 -> 4.75 M
instructions per request for the round's changes together; see the performance record).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import hpack.hpack
import hpack.table

PINNED = {
    "hpack.hpack.Encoder.__init__": "2e55e688e954627c",
    "hpack.table.HeaderTable.add": "1ddcd125d93e2da6",
    "hpack.table.HeaderTable.search": "5c80da889c55ddf2",
    "hpack.table.HeaderTable._shrink": "958218ade9869ea1",
    "hpack.table.HeaderTable.maxsize": "97fb24dc7c000f27",
}
ORIGINALS: dict[str, Any] = {
    "hpack.hpack.Encoder.__init__": hpack.hpack.Encoder.__init__,
    "hpack.table.HeaderTable.add": hpack.table.HeaderTable.add,
    "hpack.table.HeaderTable.search": hpack.table.HeaderTable.search,
    "hpack.table.HeaderTable._shrink": hpack.table.HeaderTable._shrink,
    "hpack.table.HeaderTable.maxsize": hpack.table.HeaderTable.maxsize,
}


class IndexedHeaderTable(hpack.table.HeaderTable):
    """hpack's HeaderTable that also knows, per (name, value) and per name, its newest dynamic entry.

    Entries are numbered as they are added (`_added`): the entry numbered n sits at position
    `_added - 1 - n` of `dynamic_entries` (new ones go in front, old ones leave from the back). An
    evicted entry leaves the index if it was the newest with its key (no older one is left then).
    A table cleared by a resize leaves numbers behind: a search checks the entry at the index it
    found, and walks the table as hpack does when it is not the one."""

    def __init__(self) -> None:
        super().__init__()
        self._added = 0
        self._newest: dict[tuple[bytes, bytes], int] = {}
        self._newest_named: dict[bytes, int] = {}

    def add(self, name: bytes, value: bytes) -> None:
        """hpack 4.2's HeaderTable.add, numbering the entry it adds."""
        size = hpack.table.table_entry_size(name, value)
        if size > self._maxsize:
            self.dynamic_entries.clear()
            self._current_size = 0
            self._newest.clear()
            self._newest_named.clear()
        else:
            self.dynamic_entries.appendleft((name, value))
            self._newest[(name, value)] = self._newest_named[name] = self._added
            self._added += 1
            self._current_size += size
            self._shrink()

    def _shrink(self) -> None:
        """hpack 4.2's HeaderTable._shrink, forgetting an evicted entry that was the newest with its key."""
        cursize = self._current_size
        entries, newest, named = self.dynamic_entries, self._newest, self._newest_named
        while cursize > self._maxsize:
            gone = self._added - len(entries)  # the number of the entry at the back
            name, value = entries.pop()
            cursize -= hpack.table.table_entry_size(name, value)
            if newest.get((name, value)) == gone:
                del newest[(name, value)]
            if named.get(name) == gone:
                del named[name]
        self._current_size = cursize

    def search(self, name: bytes, value: bytes) -> tuple[int, bytes, bytes | None] | None:
        """What hpack 4.2's HeaderTable.search answers: a perfect match (static, else the newest dynamic
        one), else a match on the name (static, else the newest dynamic one), else None."""
        static = hpack.table.HeaderTable.STATIC_TABLE_MAPPING.get(name)
        if static:
            index = static[1].get(value)
            if index is not None:
                return index, name, value
        entries = self.dynamic_entries
        offset = hpack.table.HeaderTable.STATIC_TABLE_LENGTH + 1
        n = self._newest.get((name, value))
        if n is not None:
            at = self._added - 1 - n
            if 0 <= at < len(entries) and entries[at] == (name, value):
                return at + offset, name, value
            return super().search(name, value)  # left behind by a clear: hpack's own walk
        if static:
            return static[0], name, None
        n = self._newest_named.get(name)
        if n is not None:
            at = self._added - 1 - n
            if 0 <= at < len(entries) and entries[at][0] == name:
                return at + offset, name, None
            return super().search(name, value)
        return None


_ENCODER_INIT: Callable[..., None] = ORIGINALS["hpack.hpack.Encoder.__init__"]


def _encoder_init(self: hpack.hpack.Encoder, _init: Callable[..., None] = _ENCODER_INIT) -> None:
    """hpack's Encoder.__init__, with the indexed table."""
    _init(self)
    self.header_table = IndexedHeaderTable()


def apply(target: Any) -> None:
    """Give every new hpack encoder the indexed table (idempotent)."""
    hpack.hpack.Encoder.__init__ = _encoder_init  # type: ignore[method-assign]


def revert() -> None:
    """hpack's own table back for new encoders."""
    hpack.hpack.Encoder.__init__ = ORIGINALS["hpack.hpack.Encoder.__init__"]  # type: ignore[method-assign]
