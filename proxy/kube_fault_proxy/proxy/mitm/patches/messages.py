"""Messages built without field type checks (mitmproxy's MessageData.__post_init__ as a no-op).

What it replaces: `mitmproxy.http.MessageData.__post_init__`, a dataclass post-init defined only
under `__debug__`, which runs `typecheck.check_option_type` on all six fields of every request and
response mitmproxy builds. Why: they come from the wire, where h2 and the HTTP/1 reader have already
produced bytes, `Headers` and floats; the check guards programming errors only, and mitmproxy skips
it itself under `python -O`. Here it is a no-op, without turning off the asserts `-O` would drop.
What it bought (issue 23, first round, py-spy of a YuniKorn wave): the type checks' share of the
proxy's samples (part of "message models", 6.5 % -> 3.9 % with the other changes of that round).
"""

from __future__ import annotations

from typing import Any

from mitmproxy import http

# Absent under python -O: then there is nothing to replace, and the pin is of nothing.
_checked_post_init = vars(http.MessageData).get("__post_init__")

PINNED = {"mitmproxy.http.MessageData.__post_init__": "f65088e210cd9cc1"} if _checked_post_init else {}
ORIGINALS: dict[str, Any] = (
    {"mitmproxy.http.MessageData.__post_init__": _checked_post_init} if _checked_post_init else {})


def _no_type_checks(self: http.MessageData) -> None:
    """MessageData's post-init, without the field type checks."""


def apply(target: Any) -> None:
    """Build messages without the type checks (idempotent)."""
    http.MessageData.__post_init__ = _no_type_checks  # type: ignore[method-assign]


def revert() -> None:
    """mitmproxy's own post-init back."""
    if _checked_post_init is not None:
        http.MessageData.__post_init__ = _checked_post_init  # type: ignore[method-assign]
