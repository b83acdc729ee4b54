"""Frame reprs formatted only when logged (hyper-h2's _receive_frame trace).

What it replaces: the name `repr` in `h2.connection`, whose only use is `_receive_frame`'s `trace` call.
Why: hyper-h2 formats `repr(frame)` for every frame it receives, for a `trace` its default logger drops;
here `repr` in `h2.connection` returns a placeholder that formats the frame only if a logger does print it
(mitmproxy's debug logger does).

What it bought: part of issue 23's second round (callgrind, Binding POSTs one at a time: 5.62 -> 4.75 M
instructions per request for the round's changes together; see the performance record).
"""

from __future__ import annotations

from typing import Any

import h2.connection

PINNED = {
    "h2.connection.H2Connection._receive_frame": "39b2e16b4fd74ed0",
}
ORIGINALS: dict[str, Any] = {
    "h2.connection.H2Connection._receive_frame": h2.connection.H2Connection._receive_frame,
}


class _LazyRepr:
    """repr(obj), formatted only when a logger prints it."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __str__(self) -> str:
        return repr(self.obj)

    __repr__ = __str__


def apply(target: Any) -> None:
    """Format frame reprs lazily (idempotent)."""
    vars(h2.connection)["repr"] = _LazyRepr  # the module's only repr: _receive_frame's trace


def revert() -> None:
    """hyper-h2's own repr back (the builtin)."""
    vars(h2.connection).pop("repr", None)
