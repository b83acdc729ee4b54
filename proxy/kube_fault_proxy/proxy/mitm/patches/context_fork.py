"""A stream's context forked without a throwaway Server (mitmproxy's Context.fork).

What it replaces: `mitmproxy.proxy.context.Context.fork`. Why: it runs once per HTTP request and builds a
new `Context`, whose constructor makes a `connection.Server` — a dataclass with a uuid4 id and a
`__setattr__` hook per field — only for `fork()` to replace it with the parent's the next line: 3.5 % of
the proxy's samples. Here the fork copies the three fields.

What it bought: part of issue 23's second round (callgrind, Binding POSTs one at a time: 5.62 -> 4.75 M
instructions per request for the round's changes together; see the performance record).
"""

from __future__ import annotations

from typing import Any

from mitmproxy.proxy import context

PINNED = {
    "mitmproxy.proxy.context.Context.fork": "cad9374a0689f10a",
    "mitmproxy.proxy.context.Context.__init__": "7ee4176662abb9c7",
}
ORIGINALS: dict[str, Any] = {
    "mitmproxy.proxy.context.Context.fork": context.Context.fork,
    "mitmproxy.proxy.context.Context.__init__": context.Context.__init__,
}


def _fork(self: context.Context) -> context.Context:
    """mitmproxy 12.3's Context.fork, without constructing the Server it overwrites."""
    ret = context.Context.__new__(context.Context)
    ret.client = self.client
    ret.options = self.options
    ret.server = self.server
    ret.layers = self.layers.copy()
    return ret


def apply(target: Any) -> None:
    """Fork contexts without the throwaway Server (idempotent)."""
    context.Context.fork = _fork  # type: ignore[method-assign]


def revert() -> None:
    """mitmproxy's own fork back."""
    context.Context.fork = ORIGINALS["mitmproxy.proxy.context.Context.fork"]  # type: ignore[method-assign]
