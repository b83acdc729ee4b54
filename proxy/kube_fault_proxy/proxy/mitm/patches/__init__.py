"""Every change this proxy makes to mitmproxy, hyper-h2 and hpack beyond mitmproxy's addon API, in one package.

Each change is one module here. Its docstring says what it replaces, why, and what it bought when it
was measured; its `PINNED` maps the qualified name of every library function it replaces, wraps or
reproduces to the sha256 (first 16 hex digits) of that function's source in the version it was
verified against; its `ORIGINALS` holds those functions as imported (before anything is changed);
`apply(target)` makes the change and `revert()` undoes it.

`install()` applies a change only when every pinned source is, at run time, the one it was verified
against; otherwise it leaves the library's own code in place and says so once in the log, with the
function that differs and the versions installed. `/v1/info` and the `kfp_mitm_change` metric list each
change as applied or skipped, with the reason. `serve --stock-mitmproxy` skips them all: mitmproxy as
it ships (the stock path, tested like the changed one).

`internals.py` and `stream_ticks.py` replace nothing: the first is every read of mitmproxy's proxyserver
internals (connections, handlers, transports, layers) the addons need, and says in its header why it needs no
gate; the second wakes a streamed answer on a timer by injecting an event (`delayEvents`), and is gated at run
time by its own pins (`stream_ticks.verified()`). `tests/unit/test_library_changes.py` holds every module here
to one of the three.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
from dataclasses import dataclass
from importlib import metadata
from types import ModuleType
from typing import Any

from kube_fault_proxy.proxy.mitm.patches import (
    authority_memo,
    context_fork,
    dispatch,
    encoder_table,
    frame_repr,
    header_checks,
    huffman_memo,
    inline_hooks,
    messages,
    option_reads,
    stream_counts,
    stream_limit,
    stream_queue,
)

log = logging.getLogger(__name__)

# In the order they are applied (dispatch before inline_hooks, which uses its table when it is there).
CHANGES: tuple[ModuleType, ...] = (
    messages, dispatch, inline_hooks, context_fork, option_reads, authority_memo, frame_repr, header_checks,
    huffman_memo, encoder_table, stream_limit, stream_counts, stream_queue,
)
LIBRARIES = ("mitmproxy", "h2", "hpack", "hyperframe")


@dataclass(frozen=True)
class Target:
    """What a change may need to know: the master it goes into and the proxy's stream limit."""

    master: Any
    stream_limit: int = stream_limit.DEFAULT


@dataclass(frozen=True)
class Outcome:
    """Whether one change was applied, and why not if it was not."""

    name: str
    summary: str
    applied: bool
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """As /v1/info lists it."""
        return {"name": self.name, "summary": self.summary, "applied": self.applied, "reason": self.reason}


def name_of(change: ModuleType) -> str:
    """A change's name: its module's."""
    return change.__name__.rsplit(".", 1)[1]


def summary_of(change: ModuleType) -> str:
    """The first line of a change's docstring."""
    return (change.__doc__ or "").strip().splitlines()[0]


def source_hash(obj: Any) -> str:
    """sha256 (first 16 hex digits) of an object's source (a property's: its getter's and setter's), as PINNED
    holds it."""
    if isinstance(obj, property):
        source = "".join(inspect.getsource(f) for f in (obj.fget, obj.fset) if f is not None)
    else:
        source = inspect.getsource(obj)
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def versions() -> dict[str, str]:
    """The installed versions of the libraries the changes touch."""
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


def mismatch(change: ModuleType) -> str | None:
    """Why a change's pinned sources are not the installed ones (None: they all are)."""
    pinned: dict[str, str] = change.PINNED
    originals: dict[str, Any] = change.ORIGINALS
    if set(pinned) != set(originals):
        return f"its pins and originals name different functions: {sorted(set(pinned) ^ set(originals))}"
    for qualname, sha in pinned.items():
        try:
            found = source_hash(originals[qualname])
        except (OSError, TypeError) as e:
            return f"the source of {qualname} cannot be read ({e})"
        if found != sha:
            return (f"{qualname} is not the source it was verified against (sha256 {found}, verified {sha}; "
                    f"installed: {', '.join(f'{k} {v}' for k, v in versions().items())})")
    return None


_outcomes: list[Outcome] = []


def install(target: Target, enabled: bool = True) -> list[Outcome]:
    """Apply every change whose library code is the one it was verified against (all of them skipped when
    not `enabled`); log each skipped one once. Returns, and keeps for `outcomes()`, what was done."""
    done = []
    for change in CHANGES:
        reason = "turned off (--stock-mitmproxy): mitmproxy as it ships" if not enabled else mismatch(change)
        if reason is None:
            change.apply(target)
            done.append(Outcome(name_of(change), summary_of(change), True, "the verified source is installed"))
        else:
            if enabled:
                log.warning("kube-fault-proxy: the library change %s is skipped, the library's own code is used: %s",
                            name_of(change), reason)
            done.append(Outcome(name_of(change), summary_of(change), False, reason))
    _outcomes[:] = done
    return done


def uninstall() -> None:
    """Every change undone: the libraries as they ship (for tests that compare the two)."""
    for change in reversed(CHANGES):
        change.revert()
    _outcomes.clear()


def applied(change: ModuleType) -> bool:
    """Whether the last install() applied this change."""
    return any(o.applied and o.name == name_of(change) for o in _outcomes)


def outcomes() -> list[Outcome]:
    """What the last install() did (empty before it)."""
    return list(_outcomes)
