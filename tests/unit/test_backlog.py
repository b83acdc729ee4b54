"""A feed stream that does not drain is dropped: the watch's rule, the backlog read from a transport, the
stream aborting its connection, and the registry that finds a connection's transport (no sockets)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.proxy.control.backlog import DrainWatch, unsent_bytes
from kube_fault_proxy.proxy.control.events import EventStream
from kube_fault_proxy.proxy.control.feed import Feed
from kube_fault_proxy.proxy.control.server import Connections
from kube_fault_proxy.proxy.runtime import Runtime

ROOT = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("seen", "behind"),
    [
        ([(1.0, 0), (4.0, 0), (8.0, 10)], False),  # drained 4 s ago
        ([(1.0, 10), (4.9, 10)], False),  # not drained since the start, 4.9 s ago
        ([(1.0, 10), (5.0, 10)], True),  # not drained for 5 s
        ([(1.0, 0), (3.0, 99), (9.0, 1)], True),
        ([(6.0, 0)], False),
        ([(5.0, 1), (5.1, 0)], False),  # drained just in time
    ],
    ids=["drained-recently", "not-yet", "behind", "behind-after-draining", "drained", "just-in-time"],
)
def test_a_stream_is_behind_once_it_has_not_drained_for_the_bound(seen: list[tuple[float, int]], behind: bool) -> None:
    clock = Clock()
    watch = DrainWatch(clock, seconds=5.0)
    for at, unsent in seen:
        clock.now = 100.0 + at
        watch.observe(unsent)
    assert watch.behind() is behind
    assert watch.remaining() == pytest.approx(5.0 - (clock.now - watch.drained_at))


class Transport:
    """What the stream asks of an asyncio transport."""

    def __init__(self, buffered: int) -> None:
        self.buffered = buffered
        self.aborted = False

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default  # no socket: only the transport's own buffer counts

    def abort(self) -> None:
        self.aborted = True


def test_the_backlog_is_what_the_transport_holds_without_a_socket() -> None:
    assert unsent_bytes(Transport(1234)) == 1234  # type: ignore[arg-type]


@pytest.mark.parametrize(("buffered", "dropped"), [(0, False), (4096, True)], ids=["keeps-up", "never-drains"])
def test_a_stream_that_never_drains_is_aborted_and_journaled(runtime: Runtime, buffered: int, dropped: bool) -> None:
    async def scenario() -> tuple[Transport, Feed, list[dict[str, Any]]]:
        feed = Feed(runtime, interval=0.02)
        transport = Transport(buffered)
        stream = EventStream(feed, transport, seconds=0.2)  # type: ignore[arg-type]
        sent: list[dict[str, Any]] = []
        gone = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
            if transport.aborted:
                gone.set()

        task = asyncio.ensure_future(stream({"type": "http", "client": ("127.0.0.1", 5)}, receive, send))
        await asyncio.sleep(0.6)
        if not task.done():
            gone.set()
        await asyncio.wait_for(task, 2)
        return transport, feed, sent

    transport, feed, sent = asyncio.run(scenario())
    assert transport.aborted is dropped and feed.subscribers == 0
    notes = [r for r in runtime.journal.since(0) if r["event"] == "feed-client-dropped"]
    assert [(r["client"], r["unsentBytes"]) for r in notes] == ([("127.0.0.1:5", 4096)] if dropped else [])
    assert len(sent) >= (2 if dropped else 10)  # it streamed until it fell behind, or throughout


def test_connections_are_known_while_open() -> None:
    made: list[object] = []

    class Base(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            made.append(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            made.remove(made[0])

    class Peer:
        def get_extra_info(self, name: str, default: Any = None) -> Any:
            return ("127.0.0.1", 4242) if name == "peername" else default

    connections = Connections()
    protocol = connections.protocol(Base)()
    peer: Any = Peer()
    protocol.connection_made(peer)
    assert connections.get(("127.0.0.1", 4242)) is peer and len(connections) == 1 and made == [peer]
    protocol.connection_lost(None)
    assert connections.get(("127.0.0.1", 4242)) is None and len(connections) == 0 and made == []
