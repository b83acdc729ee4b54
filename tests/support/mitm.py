"""mitmproxy without a network: a Runtime to drive addons with, HTTP flows as the proxy sees them,
and real connection handlers on fake streams (what the connection-closing code acts on)."""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from kube_fault_proxy.proxy.journal import Journal
from kube_fault_proxy.proxy.mitm.addon import FaultAddon
from kube_fault_proxy.proxy.mitm.held import HeldAnswers
from kube_fault_proxy.proxy.mitm.own_client import own_client
from kube_fault_proxy.proxy.mitm.stale_reads import StaleAnswers, StaleReads
from kube_fault_proxy.proxy.mitm.watch_edits import WatchEdits
from kube_fault_proxy.proxy.profiles.library import Entry, Library
from kube_fault_proxy.proxy.profiles.profile import FaultProfile
from kube_fault_proxy.proxy.runtime import Runtime
from kube_fault_proxy.proxy.stale_views import StaleViews
from kube_fault_proxy.proxy.watch_signals import WatchSignals
from mitmproxy import connection, ctx, hooks, http
from mitmproxy.connection import ConnectionState
from mitmproxy.proxy import mode_specs
from mitmproxy.proxy.mode_servers import ProxyConnectionHandler
from mitmproxy.proxy.server import ConnectionIO
from mitmproxy.test import tflow, tutils

REVERSE = "reverse:https://127.0.0.1:6443@127.0.0.1:0"
JSON = (b"content-type", b"application/json")


class Clock:
    """A clock the test moves."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def runtime(tmp_path: Path, *profiles: FaultProfile, clock: Clock | None = None) -> Runtime:
    """A runtime over these profiles, journaling to tmp_path, on a clock of its own."""
    library = Library({p.name: Entry(p, "test") for p in profiles})
    return Runtime(library, Journal(tmp_path / "journal.jsonl", wall=lambda: 5.0), clock or Clock(), lambda: 5.0)


def events(rt: Runtime, *names: str) -> list[dict[str, Any]]:
    """The journal's records of these events, in order."""
    return [r for r in rt.journal.since(0) if r["event"] in names]


def flow(method: str, path: str, body: bytes = b"", headers: Iterable[tuple[bytes, bytes]] = (),
         client: connection.Client | None = None) -> http.HTTPFlow:
    """A live flow whose request has just been read."""
    req = tutils.treq(method=method.encode(), path=path.encode(), content=body,
                      headers=http.Headers([(b"user-agent", b"kube-scheduler/v1.33"), *headers]))
    return tflow.tflow(req=req, client_conn=client)


def binding(pod: str = "p", node: str = "n1", client: connection.Client | None = None) -> http.HTTPFlow:
    """A Binding POST, as the scheduler sends it."""
    body = json.dumps({"kind": "Binding", "target": {"kind": "Node", "name": node}}).encode()
    return flow("POST", f"/api/v1/namespaces/default/pods/{pod}/binding", body, [JSON], client)


def answer(status: int, body: bytes = b"{}", headers: Iterable[tuple[bytes, bytes]] = (JSON,)) -> http.Response:
    """The upstream's answer."""
    return tutils.tresp(status_code=status, content=body, headers=http.Headers(list(headers)))


@dataclass
class Faults:
    """The fault addon with the addons that carry out what it stamps for a read or a watch (the stale views, the watch
    edits), in the order serve's chain has them, sharing one revision log and one set of watch signals."""

    views: StaleViews
    answers: StaleAnswers
    addon: FaultAddon
    edits: WatchEdits
    reads: StaleReads

    @classmethod
    def of(cls, rt: Runtime, held: HeldAnswers | None = None,
           client: Callable[[], httpx.AsyncClient] = own_client) -> Faults:
        signals = WatchSignals()
        views = StaleViews(rt.counters, rt.clock, signals)
        return cls(views, StaleAnswers(views), FaultAddon(rt, held), WatchEdits(rt.counters.note, signals, rt.activations),
                   StaleReads(views, client))

    @property
    def before(self) -> list[Any]:
        """What sits before the fault addon."""
        return [self.answers]

    @property
    def after(self) -> list[Any]:
        """What sits right after it (after the outage's start)."""
        return [self.edits, self.reads]

    @property
    def chain(self) -> list[Any]:
        return [*self.before, self.addon, *self.after]


async def hook(addon: Any, name: str, *args: Any) -> None:
    """Run one hook of one addon as mitmproxy's dispatch does (awaiting what it returns)."""
    func = getattr(addon, name, None)
    if func is None:
        return
    res = func(*args)
    if res is not None and inspect.isawaitable(res):
        await res


async def flow_hooks(addons: Iterable[Any], f: http.HTTPFlow, *names: str) -> None:
    """These flow hooks, in order, for every addon (in chain order)."""
    chain = list(addons)
    for name in names:
        assert name in hooks.all_hooks, name
        for addon in chain:
            await hook(addon, name, f)


async def exchange(addons: Iterable[Any], f: http.HTTPFlow, upstream: http.Response | None = None) -> None:
    """One request through the addons as mitmproxy runs it: its request hooks; then, unless an addon
    answered or killed it, the upstream's answer (None: the connection dropped) with the response hooks;
    the error hook for a flow that failed."""
    chain = list(addons)
    await flow_hooks(chain, f, "requestheaders", "request")
    if f.response is not None and f.error is None:
        await flow_hooks(chain, f, "response")  # answered by the proxy: mitmproxy sends it, no responseheaders
    elif f.error is None:
        if upstream is None:
            f.error = tflow.terr("peer closed connection")
        else:
            f.response = upstream
            await flow_hooks(chain, f, "responseheaders", "response")
    if f.error is not None:
        await flow_hooks(chain, f, "error")


class Task:
    """Stands in for a connection's reader task: records its cancellation."""

    def __init__(self) -> None:
        self.cancelled: str | None = None

    def cancel(self, msg: str | None = None) -> bool:
        self.cancelled = msg or "cancelled"
        return True

    def done(self) -> bool:
        return self.cancelled is not None


class Transport:
    """Records an abort."""

    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


class Writer:
    """A stream writer with nowhere to write: what mitmproxy's handler asks of one."""

    def __init__(self, peer: tuple[str, int] = ("10.0.0.7", 40001)) -> None:
        self.transport = Transport()
        self.written = b""
        self.closed = False
        self._extra = {"peername": peer, "sockname": ("127.0.0.1", 7443), "transport_protocol": "tcp"}

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    def write(self, data: bytes) -> None:
        self.written += data

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    async def wait_closed(self) -> None:
        return None


def upstream_conn() -> connection.Server:
    """An open upstream (apiserver) connection."""
    conn = tflow.tserver_conn()
    conn.state = ConnectionState.OPEN
    return conn


def live_handler(server: Any, upstreams: int = 1, peer: tuple[str, int] = ("10.0.0.7", 40001)) -> Any:
    """A real mitmproxy connection handler for one client (fake streams), registered with the
    proxyserver as mitmproxy registers one, with `upstreams` open upstream connections."""
    mode = mode_specs.ProxyMode.parse(REVERSE)
    handler = ProxyConnectionHandler(ctx.master, asyncio.StreamReader(), Writer(peer), ctx.options, mode)
    handler.transports[handler.client].handler = Task()
    for _ in range(upstreams):
        handler.transports[upstream_conn()] = ConnectionIO(handler=Task(), writer=Writer())
    server.connections[handler.client.id] = handler
    return handler
