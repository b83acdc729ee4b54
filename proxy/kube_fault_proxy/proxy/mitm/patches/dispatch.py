"""Hook dispatch that visits only the addons implementing a hook, once per hook (a lean AddonManager).

What it replaces: the master's `mitmproxy.addonmanager.AddonManager` by a subclass whose
`trigger_event` and `handle_lifecycle` reproduce mitmproxy's (its `safecall` logging, `AddonHalt`).
Why: mitmproxy's AddonManager walks every addon for every hook (a generator, a traversal and a
`safecall` context manager per addon), and after each flow hook walks them all again for the
`update` hook, which only its UIs implement. A proxied request fires four flow hooks, so that is
~70 addon visits per request where this proxy's chain has a handful of implementers. Here each hook
name maps to its implementers, found once in mitmproxy's own order; errors are still logged as
mitmproxy's `safecall` logs them (without its context manager per call) and `AddonHalt` still ends a
hook. The chain is fixed after startup; any change to it (add, remove, clear) drops the table.
What it bought (issue 23, first round): the addon walks out of every request's four hooks (mitmproxy
core's share of the proxy's samples; see the performance record). `tests/unit/test_hooks.py` checks
it against mitmproxy's own dispatch.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from mitmproxy import addonmanager, exceptions, flow, hooks

Handler = tuple[Any, Callable[..., Any]]

PINNED = {
    "mitmproxy.addonmanager.AddonManager.trigger_event": "b763c59bc4992e33",
    "mitmproxy.addonmanager.AddonManager.handle_lifecycle": "38c97e792d1db5b7",
    "mitmproxy.addonmanager.AddonManager._iter_hooks": "350b419ab7284091",
    "mitmproxy.addonmanager.AddonManager.__init__": "5e4ff02a74f2c6e7",
    "mitmproxy.addonmanager.safecall": "f2052c18340e99b0",
}
ORIGINALS: dict[str, Any] = {
    "mitmproxy.addonmanager.AddonManager.trigger_event": addonmanager.AddonManager.trigger_event,
    "mitmproxy.addonmanager.AddonManager.handle_lifecycle": addonmanager.AddonManager.handle_lifecycle,
    "mitmproxy.addonmanager.AddonManager._iter_hooks": addonmanager.AddonManager._iter_hooks,
    "mitmproxy.addonmanager.AddonManager.__init__": addonmanager.AddonManager.__init__,
    "mitmproxy.addonmanager.safecall": addonmanager.safecall,
}


def handler_args(event: hooks.Hook, _names: dict[type, tuple[str, ...]] = {}) -> list[Any]:  # noqa: B006 (a cache)
    """A hook's arguments, as its handlers take them."""
    names = _names.get(type(event))
    if names is None:
        names = _names[type(event)] = tuple(f.name for f in dataclasses.fields(event))  # type: ignore[arg-type]
    return [getattr(event, n) for n in names]


def safecall_error(e: Exception) -> None:
    """What mitmproxy's `addonmanager.safecall` does with an addon's error: log it, traceback cut to the
    addon's frames. (A try/except in place of that generator context manager per handler call.)"""
    tb = addonmanager.cut_traceback(e.__traceback__, "invoke_addon_sync")
    tb = addonmanager.cut_traceback(tb, "invoke_addon")
    _log.error(f"Addon error: {e}", exc_info=(type(e), e, tb))


def run_handlers(handlers: list[tuple[Any, Callable[..., Any]]], args: list[Any]) -> Awaitable[Any] | None:
    """Call a hook's handlers in order (errors logged as safecall does, AddonHalt ends it); if one returns an
    awaitable, return a coroutine that awaits it and runs the rest."""
    for i, (_, func) in enumerate(handlers):
        try:
            res = func(*args)
        except exceptions.AddonHalt:
            return None
        except exceptions.OptionsError:
            raise
        except Exception as e:
            safecall_error(e)
            continue
        if res is not None and inspect.isawaitable(res):
            return finish_handlers(res, handlers[i + 1:], args)
    return None


async def finish_handlers(pending: Awaitable[Any], rest: list[tuple[Any, Callable[..., Any]]], args: list[Any]) -> None:
    try:
        await pending
    except exceptions.AddonHalt:
        return
    except exceptions.OptionsError:
        raise
    except Exception as e:
        safecall_error(e)
    more = run_handlers(rest, args)
    if more is not None:
        await more


_log = logging.getLogger(addonmanager.__name__)  # the logger safecall logs to
UPDATE = hooks.UpdateHook([])


class LeanAddonManager(addonmanager.AddonManager):
    """mitmproxy's AddonManager with per-hook handler lists and no `update` hook nobody listens to."""

    def __init__(self, master: Any) -> None:
        self._handlers: dict[str, list[Handler]] = {}
        super().__init__(master)

    def handlers(self, event: hooks.Hook) -> list[Handler]:
        """The (addon, callable) pairs implementing a hook, in mitmproxy's own order."""
        found = self._handlers.get(event.name)
        if found is None:
            found = self._handlers[event.name] = [pair for a in self.chain for pair in self._iter_hooks(a, event)]
        return found

    def _changed(self) -> None:
        self._handlers.clear()

    def register(self, addon: Any) -> Any:
        self._changed()
        return super().register(addon)

    def add(self, *addons: Any) -> None:
        self._changed()
        super().add(*addons)

    def remove(self, addon: Any) -> None:
        self._changed()
        super().remove(addon)

    def clear(self) -> None:
        self._changed()
        super().clear()

    async def trigger_event(self, event: hooks.Hook) -> None:
        handlers = self.handlers(event)
        if not handlers:
            return
        rest = run_handlers(handlers, handler_args(event))
        if rest is not None:
            await rest

    async def handle_lifecycle(self, event: hooks.Hook) -> None:
        await self.trigger_event(event)
        if self.handlers(UPDATE):
            message = handler_args(event)[0]
            if isinstance(message, flow.Flow):
                await self.trigger_event(hooks.UpdateHook([message]))


def apply(target: Any) -> None:
    """Make the target's freshly built master dispatch hooks leanly (before any addon is added)."""
    install(target.master)


def revert() -> None:
    """Nothing global to undo: a master keeps the manager it was built with."""


def install(master: Any) -> None:
    """Make a freshly built master dispatch hooks leanly (before any addon is added)."""
    old = master.addons
    if old.chain:
        raise RuntimeError("install the lean hook dispatch before adding addons")
    master.options.changed.disconnect(old._configure_all)
    master.addons = LeanAddonManager(master)
