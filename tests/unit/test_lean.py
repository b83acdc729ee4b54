"""proxy.mitm.lean: what it takes out of mitmproxy, guarded so that an upgrade that changes any of it
fails here, and the inline hook path checked against mitmproxy's own (same handlers, same order,
same completion, a task only where a handler awaits)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from kube_fault_proxy.proxy.mitm import patches
from kube_fault_proxy.proxy.mitm.patches import dispatch as hooks
from kube_fault_proxy.proxy.mitm.patches import inline_hooks as lean
from kube_fault_proxy.proxy.mitm.patches import messages
from mitmproxy import exceptions, http, master, options
from mitmproxy import version as mitmproxy_version
from mitmproxy.proxy import commands, events, mode_servers, server
from mitmproxy.test import tflow
from mitmproxy.utils import asyncio_utils

# sha256 (first 16 hex digits) of each replaced or reproduced function's source, in mitmproxy 12.3.1.
# When an upgrade changes one: re-read it, carry the change into its module, then update the pin there.
PINNED = {
    "mitmproxy.http.MessageData.__post_init__": "f65088e210cd9cc1",
    "mitmproxy.proxy.server.ConnectionHandler.server_event": "a2b42657ebe8bf6d",
    "mitmproxy.proxy.server.ConnectionHandler.hook_task": "9ac7970160526268",
    "mitmproxy.proxy.mode_servers.ProxyConnectionHandler.handle_hook": "9f8b52fd798203c9",
}


def test_every_replaced_function_is_pinned_and_unchanged() -> None:
    assert {**messages.PINNED, **lean.PINNED} == PINNED
    assert (patches.mismatch(messages), patches.mismatch(lean)) == (None, None), (
        f"mitmproxy {mitmproxy_version.VERSION} changed what proxy/mitm/patches/messages.py or inline_hooks.py "
        f"replaces or reproduces: re-read it and update the module, then its pins")


def test_messages_are_built_without_type_checks_once_installed_and_with_them_otherwise() -> None:
    assert "__post_init__" not in vars(http.RequestData) and "__post_init__" not in vars(http.ResponseData)

    def wrong() -> http.Request:
        return http.Request("127.0.0.1", 443, b"POST", b"https", b"", b"/x", b"HTTP/2.0",
                            http.Headers(), b"", None, "not a float", None)  # type: ignore[arg-type]
    messages.revert()
    try:
        with pytest.raises(TypeError, match="timestamp_start"):
            wrong()
    finally:
        messages.apply(None)
    assert wrong().timestamp_start == "not a float"  # nothing checks: the wire's types are mitmproxy's own


def test_install_replaces_server_event_of_the_proxy_handler_only() -> None:
    lean.apply(None)
    assert mode_servers.ProxyConnectionHandler.server_event is lean.server_event
    assert server.ConnectionHandler.server_event is not lean.server_event


class Recorder:
    def __init__(self, name: str, calls: list[str], fail: bool = False, halt: bool = False,
                 awaits: bool = False) -> None:
        self.name, self.calls, self.fail, self.halt, self.awaits = name, calls, fail, halt, awaits

    def request(self, flow: Any) -> Any:
        self.calls.append(f"{self.name}.request")
        if self.fail:
            raise ValueError(f"{self.name} broke")
        if self.halt:
            raise exceptions.AddonHalt()
        if self.awaits:
            async def later() -> None:
                await asyncio.sleep(0)
                self.calls.append(f"{self.name}.awaited")
            return later()
        return None


class Layer:
    """A layer that starts one blocking request hook, then records what it is handed."""

    def __init__(self, hook: commands.StartHook, calls: list[str]) -> None:
        self.hook, self.calls = hook, calls

    def handle_event(self, event: events.Event) -> Iterator[commands.Command]:
        self.calls.append(f"layer:{type(event).__name__}")
        if isinstance(event, events.Start):
            yield self.hook
            yield commands.Log("after the hook was started")


class Watchdog:
    def register_activity(self) -> None:
        pass

    @contextlib.contextmanager
    def disarm(self) -> Iterator[None]:
        yield


class Handler:
    """The parts of a ConnectionHandler that server_event touches."""

    server_event = lean.server_event

    def __init__(self, m: master.Master, calls: list[str]) -> None:
        self.master, self.calls = m, calls
        self._server_event_lock = asyncio.Lock()
        self.timeout_watchdog = Watchdog()
        self.client = type("C", (), {"peername": ("127.0.0.1", 1)})()
        self.transports: dict[Any, Any] = {}
        self.layer: Layer | None = None

    def log(self, message: str, level: int = logging.INFO, exc_info: Any = None) -> None:
        self.calls.append(f"log:{message}")

    async def hook_task(self, hook: commands.StartHook) -> None:
        self.calls.append("mitmproxy's hook_task")
        await self.master.addons.handle_lifecycle(hook)
        await self.server_event(events.HookCompleted(hook))


def run(*addons: Any, with_update: bool = False) -> tuple[list[str], list[str]]:
    """Drive server_event(Start) through a real lean AddonManager; the calls, and the tasks created."""
    calls: list[str] = []
    tasks: list[str] = []

    async def go() -> None:
        m = master.Master(options.Options())
        hooks.install(m)
        m.addons.add(*addons)
        if with_update:
            m.addons.add(type("U", (), {"update": lambda self, flows: calls.append("update")})())
        h = Handler(m, calls)
        flow = tflow.tflow()
        h.layer = Layer(hooks_request(flow), calls)
        real = asyncio_utils.create_task

        def counting(coro: Any, **kw: Any) -> asyncio.Task[Any]:
            tasks.append(kw["name"])
            return real(coro, **kw)
        asyncio_utils.create_task = counting  # type: ignore[assignment]
        try:
            await h.server_event(events.Start())
            for _ in range(20):
                await asyncio.sleep(0)
        finally:
            asyncio_utils.create_task = real
    asyncio.run(go())
    return calls, tasks


def hooks_request(flow: Any) -> commands.StartHook:
    from mitmproxy.proxy.layers.http import HttpRequestHook
    return HttpRequestHook(flow)


def test_a_hook_no_handler_awaits_completes_inline_before_the_layers_next_command_and_needs_no_task() -> None:
    calls, tasks = run(Recorder("a", c := []), Recorder("b", c))
    assert tasks == []
    assert c == ["a.request", "b.request"]
    assert calls == ["layer:Start", "log:after the hook was started", "layer:HookCompleted"]


def test_a_handler_that_awaits_gets_a_task_and_the_rest_and_the_completion_follow_it() -> None:
    calls, tasks = run(Recorder("a", c := []), Recorder("b", c, awaits=True), Recorder("c", c))
    assert tasks == ["handle_hook(request)"]
    assert c == ["a.request", "b.request", "b.awaited", "c.request"]
    assert calls == ["layer:Start", "log:after the hook was started", "layer:HookCompleted"]


def test_errors_are_logged_as_safecall_does_and_a_halt_ends_the_hook(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR):
        calls, tasks = run(Recorder("a", c := [], fail=True), Recorder("b", c, halt=True), Recorder("c", c))
    assert c == ["a.request", "b.request"] and tasks == []
    assert "Addon error: a broke" in caplog.text
    assert calls[-1] == "layer:HookCompleted"


def test_update_listeners_keep_mitmproxys_own_path() -> None:
    calls, tasks = run(Recorder("a", c := []), with_update=True)
    assert tasks == ["handle_hook(request)"] and "mitmproxy's hook_task" in calls
    assert c == ["a.request"] and calls[-1] == "layer:HookCompleted" and "update" in calls


class Writer:
    def __init__(self, writes: list[bytes], closing: bool = False) -> None:
        self.writes, self.closing = writes, closing

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closing


class Sender:
    """A layer that sends a run of data on two connections, logs, sends again, and closes one."""

    def __init__(self, a: Any, b: Any, calls: list[str]) -> None:
        self.a, self.b, self.calls = a, b, calls

    def handle_event(self, event: events.Event) -> Iterator[commands.Command]:
        yield commands.SendData(self.a, b"HEADERS")
        yield commands.SendData(self.b, b"WINDOW_UPDATE")
        yield commands.SendData(self.a, b"DATA")
        yield commands.Log("between")
        yield commands.SendData(self.a, b"DATA2")
        yield commands.CloseConnection(self.b)
        yield commands.SendData(self.b, b"after close")  # its transport is gone: dropped, as mitmproxy does


def test_a_run_of_sends_to_one_connection_is_one_write_in_order_and_nothing_runs_between() -> None:
    a, b = tflow.tclient_conn(), tflow.tserver_conn()
    calls: list[str] = []
    wa: list[bytes] = []
    wb: list[bytes] = []

    async def go() -> None:
        m = master.Master(options.Options())
        hooks.install(m)
        h = Handler(m, calls)
        h.layer = Sender(a, b, calls)  # type: ignore[assignment]
        h.transports = {a: server.ConnectionIO(handler=None, writer=Writer(wa)),  # type: ignore[arg-type]
                        b: server.ConnectionIO(handler=None, writer=Writer(wb))}  # type: ignore[arg-type]

        def close_connection(conn: Any, half_close: bool = False) -> None:
            calls.append(f"close {'b' if conn is b else 'a'} after {len(wb)} write(s) to b")
            h.transports.pop(conn)
        h.close_connection = close_connection  # type: ignore[attr-defined]
        await h.server_event(events.Start())
    asyncio.run(go())
    assert wa == [b"HEADERSDATA", b"DATA2"]
    assert wb == [b"WINDOW_UPDATE"]
    assert calls == ["log:between", "close b after 1 write(s) to b"]
