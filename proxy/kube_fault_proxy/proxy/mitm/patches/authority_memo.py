"""An authority parsed once (mitmproxy's url.parse_authority, memoised).

What it replaces: `mitmproxy.net.http.url.parse_authority`. Why: it validates the same
`127.0.0.1:port` (IDNA decode, label regexes) on every request; here its answers are memoised (bounded;
a `ValueError` is not memoised, so it is raised again every time).

What it bought: part of issue 23's second round (callgrind, Binding POSTs one at a time: 5.62 -> 4.75 M
instructions per request for the round's changes together; see the performance record).
"""

from __future__ import annotations

import functools
from typing import Any

from mitmproxy.net.http import url

PINNED = {
    "mitmproxy.net.http.url.parse_authority": "d8338265c05d8491",
}
ORIGINALS: dict[str, Any] = {
    "mitmproxy.net.http.url.parse_authority": url.parse_authority,
}

_parse_authority = functools.lru_cache(maxsize=256)(url.parse_authority)


def apply(target: Any) -> None:
    """Parse each authority once (idempotent)."""
    url.parse_authority = _parse_authority


def revert() -> None:
    """mitmproxy's own parse back."""
    url.parse_authority = ORIGINALS["mitmproxy.net.http.url.parse_authority"]
