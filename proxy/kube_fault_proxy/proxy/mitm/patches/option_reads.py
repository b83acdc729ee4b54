"""Option reads without deep copies of immutable values (mitmproxy's _Option.current).

What it replaces: `mitmproxy.optmanager._Option.current`. Why: every `options.x` read deep-copies the
value (and the default first, when unset): `check_body_size` alone reads two options per request.
`copy.deepcopy` of a str, bytes, int, float, bool or None is that same object, so here those are
returned as they are; lists, sets and the rest are still copied.

What it bought: part of issue 23's second round (callgrind, Binding POSTs one at a time: 5.62 -> 4.75 M
instructions per request for the round's changes together; see the performance record).
"""

from __future__ import annotations

import copy
from typing import Any

from mitmproxy import optmanager

PINNED = {
    "mitmproxy.optmanager._Option.current": "6859c2d9c826806e",
    "mitmproxy.optmanager._Option.default": "cfc9882b8960757d",
}
ORIGINALS: dict[str, Any] = {
    "mitmproxy.optmanager._Option.current": optmanager._Option.current,
    "mitmproxy.optmanager._Option.default": optmanager._Option.default,
}

_IMMUTABLE = frozenset({str, bytes, int, float, bool, type(None)})  # deepcopy returns these as they are


def _current(self: optmanager._Option) -> Any:
    """mitmproxy 12.3's _Option.current: a deep copy of the value (or of the default), unless it is
    immutable, where the copy is the value itself."""
    v = self._default if self.value is optmanager.unset else self.value
    return v if type(v) in _IMMUTABLE else copy.deepcopy(v)


def apply(target: Any) -> None:
    """Read immutable options without copying them (idempotent)."""
    optmanager._Option.current = _current  # type: ignore[method-assign]


def revert() -> None:
    """mitmproxy's own reads back."""
    optmanager._Option.current = ORIGINALS["mitmproxy.optmanager._Option.current"]  # type: ignore[method-assign]
