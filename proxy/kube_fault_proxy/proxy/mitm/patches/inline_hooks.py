"""Hooks no addon awaits answered inline, and a run of writes to one connection made one write.

What it replaces: `mitmproxy.proxy.server.ConnectionHandler.server_event` on the proxy's connection
handlers (it reproduces `hook_task` and `ProxyConnectionHandler.handle_hook` for the hooks it runs).

1. **Hooks no addon awaits are answered inline, not through a task.** For every hook a layer starts,
   mitmproxy's `server_event` creates a task (`hook_task`) that runs the addons, then re-enters
   `server_event` — behind the lock the outer call still holds — to deliver `HookCompleted`: a task, a
   lock wait and a loop iteration per hook, four hooks per request. Here `server_event` runs the hook's
   handlers (the lean dispatch's table, `dispatch.py`) on the spot; if none returns an awaitable and the
   flow is not intercepted, the `HookCompleted` of a blocking hook is handled next, inside the same
   locked call, before any other event. That is one of the orders mitmproxy itself allows (the
   completion is the next event the connection sees), and nothing in between can observe a difference:
   no await happens. A handler that does return an awaitable (a delay or a hang fault) is awaited in a
   task, as mitmproxy would, and the rest of the hook's handlers and its completion follow from there.
   Addons listening to `update` (mitmproxy's UIs; none here), or a master without the lean dispatch
   (`dispatch` skipped), keep mitmproxy's path.
2. **A run of writes to one connection is one write.** Each `SendData` command was one
   `transport.write`, and so one `send` syscall, which on loopback also runs the receiver's TCP
   processing: 20 % of the proxy's samples in a YuniKorn wave (`bench/scheduler --sample-proxy`).
   Consecutive `SendData` commands (an HTTP/2 HEADERS and DATA frame, each its own TLS record) are
   joined per connection and written when the next other command comes, or when the event is handled:
   the bytes and their order on each connection are the same, and nothing (a hook, a close) runs
   between a write and the commands before it.

What it bought (issue 23, first round): the task and lock per hook and the syscall per frame out of a
Binding's path (asyncio's share of the proxy's samples and the write syscalls; see the performance
record). `tests/unit/test_lean.py` checks the inline path against mitmproxy's own.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable
from typing import Any

from mitmproxy import flow
from mitmproxy.proxy import commands, events, mode_servers, server
from mitmproxy.utils import asyncio_utils

from kube_fault_proxy.proxy.mitm.patches.dispatch import UPDATE, LeanAddonManager, handler_args, run_handlers

PINNED = {
    "mitmproxy.proxy.server.ConnectionHandler.server_event": "a2b42657ebe8bf6d",
    "mitmproxy.proxy.server.ConnectionHandler.hook_task": "9ac7970160526268",
    "mitmproxy.proxy.mode_servers.ProxyConnectionHandler.handle_hook": "9f8b52fd798203c9",
}
ORIGINALS: dict[str, Any] = {
    "mitmproxy.proxy.server.ConnectionHandler.server_event": server.ConnectionHandler.server_event,
    "mitmproxy.proxy.server.ConnectionHandler.hook_task": server.ConnectionHandler.hook_task,
    "mitmproxy.proxy.mode_servers.ProxyConnectionHandler.handle_hook": mode_servers.ProxyConnectionHandler.handle_hook,
}


def _inline(handler: Any, hook: commands.StartHook) -> Awaitable[Any] | bool | None:
    """Run a hook's addons now. False: not inlinable (mitmproxy's own path must take it); None: done;
    an awaitable: the rest of the hook, to be awaited in a task."""
    addons = handler.master.addons
    if not isinstance(addons, LeanAddonManager) or addons.handlers(UPDATE):
        return False
    args = handler_args(hook)  # mitmproxy's Hook.args() walks dataclasses.fields() every call: 2.7 %
    rest = run_handlers(addons.handlers(hook), args)
    data = args[0]  # every hook a proxy layer starts has one argument (mitmproxy's handle_hook relies on it)
    if rest is None and isinstance(data, flow.Flow) and data.intercepted:
        return data.wait_for_resume()
    return rest


async def _hook_rest(handler: Any, hook: commands.StartHook, rest: Awaitable[Any]) -> None:
    """The part of a hook that awaits: what mitmproxy's hook_task and handle_hook do after it."""
    with handler.timeout_watchdog.disarm():
        await rest
        (data,) = hook.args()
        if isinstance(data, flow.Flow):
            await data.wait_for_resume()
    if hook.blocking:
        await handler.server_event(events.HookCompleted(hook))


async def server_event(self: Any, event: events.Event) -> None:
    """mitmproxy 12.3's ConnectionHandler.server_event, with hooks answered inline where they can be.

    Every other command is handled exactly as mitmproxy does (the branches below are its own)."""
    async with self._server_event_lock:
        # No `await` beyond this point (as in mitmproxy): events completed inline queue here.
        queue: deque[events.Event] = deque((event,))
        sends: dict[Any, list[bytes]] = {}  # a run of SendData, per connection, written as one
        while queue:
            self.timeout_watchdog.register_activity()
            try:
                for command in self.layer.handle_event(queue.popleft()):
                    if type(command) is commands.SendData:
                        sends.setdefault(command.connection, []).append(command.data)
                        continue
                    if sends:
                        _write(self, sends)
                    if isinstance(command, commands.StartHook):
                        done = _inline(self, command)
                        if done is False:
                            asyncio_utils.create_task(self.hook_task(command), name=f"handle_hook({command.name})",
                                                      keep_ref=True, client=self.client.peername)
                        elif done is None:
                            if command.blocking:
                                queue.append(events.HookCompleted(command))
                        else:
                            assert not isinstance(done, bool)
                            asyncio_utils.create_task(_hook_rest(self, command, done),
                                                      name=f"handle_hook({command.name})", keep_ref=True,
                                                      client=self.client.peername)
                    else:
                        _command(self, command)
            except Exception:
                self.log("mitmproxy has crashed!", logging.ERROR, exc_info=True)
        if sends:
            _write(self, sends)


def _write(self: Any, sends: dict[Any, list[bytes]]) -> None:
    """Write a run of SendData commands, one write per connection (mitmproxy's SendData branch)."""
    for conn, chunks in sends.items():
        if conn not in self.transports:
            continue  # The connection has already been closed.
        writer = self.transports[conn].writer
        assert writer
        if not writer.is_closing():
            writer.write(chunks[0] if len(chunks) == 1 else b"".join(chunks))
    sends.clear()


def _command(self: Any, command: commands.Command) -> None:
    """One non-hook command, as mitmproxy 12.3's server_event handles it."""
    if isinstance(command, commands.OpenConnection):
        assert command.connection not in self.transports
        handler = asyncio_utils.create_task(self.open_connection(command),
                                            name=f"server connection handler {command.connection.address}",
                                            keep_ref=False, client=self.client.peername)
        self.transports[command.connection] = server.ConnectionIO(handler=handler)
    elif isinstance(command, commands.RequestWakeup):
        task = asyncio_utils.create_task(self.wakeup(command), name=f"wakeup timer ({command.delay:.1f}s)",
                                         keep_ref=False, client=self.client.peername)
        assert task is not None
        self.wakeup_timer.add(task)
    elif isinstance(command, commands.ConnectionCommand) and command.connection not in self.transports:
        pass  # The connection has already been closed.
    elif isinstance(command, commands.SendData):
        writer = self.transports[command.connection].writer
        assert writer
        if not writer.is_closing():
            writer.write(command.data)
    elif isinstance(command, commands.CloseTcpConnection):
        self.close_connection(command.connection, command.half_close)
    elif isinstance(command, commands.CloseConnection):
        self.close_connection(command.connection, False)
    elif isinstance(command, commands.Log):
        self.log(command.message, command.level)
    else:
        raise RuntimeError(f"Unexpected command: {command}")


def apply(target: Any) -> None:
    """Answer hooks inline and join writes on the proxy's connection handlers (idempotent)."""
    mode_servers.ProxyConnectionHandler.server_event = server_event  # type: ignore[method-assign]


def revert() -> None:
    """mitmproxy's own server_event back."""
    if "server_event" in vars(mode_servers.ProxyConnectionHandler):
        del mode_servers.ProxyConnectionHandler.server_event
