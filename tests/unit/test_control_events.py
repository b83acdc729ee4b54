"""/v1/events/stream and /ui/ through the whole app, driven as ASGI calls (no sockets)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from kube_fault_proxy.proxy.control.app import build_app
from kube_fault_proxy.proxy.control.feed import Feed
from kube_fault_proxy.proxy.runtime import Runtime

from tests.support.builders import get_pod

ROOT = Path(__file__).resolve().parents[2]
Message = dict[str, Any]


def app_for(runtime: Runtime, token: str | None = None, interval: float = 0.05) -> FastAPI:
    app = build_app(runtime, {}, token)
    app.state.feed = Feed(runtime, interval=interval)
    return app


class Client:
    """One GET of the stream; leaves (http.disconnect) when `leave_when` says so, or never."""

    def __init__(self, leave_when: Callable[[list[bytes]], bool] = lambda frames: False,
                 spec_version: str = "2.3", headers: dict[str, str] | None = None) -> None:
        self.leave_when = leave_when
        self.spec_version = spec_version
        self.headers = headers or {}
        self.messages: list[Message] = []
        self.frames: list[bytes] = []
        self.left = asyncio.Event()
        self._asked = False

    async def receive(self) -> Message:
        if not self._asked:
            self._asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        if self.spec_version >= "2.4":
            await asyncio.Event().wait()  # says nothing: the next write fails instead
        await self.left.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if self.left.is_set() and self.spec_version >= "2.4":
            raise OSError("client went away")  # how an ASGI 2.4 server reports a write to a closed socket
        self.messages.append(message)
        if message["type"] == "http.response.body" and message.get("body"):
            self.frames.append(message["body"])
            if self.leave_when(self.frames):
                self.left.set()

    async def run(self, app: FastAPI, timeout: float = 5.0) -> None:
        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": self.spec_version},
                 "http_version": "1.1", "method": "GET", "scheme": "http", "path": "/v1/events/stream",
                 "raw_path": b"/v1/events/stream", "query_string": b"", "root_path": "",
                 "headers": [(b"host", b"test"), *((k.lower().encode(), v.encode()) for k, v in self.headers.items())],
                 "client": ("127.0.0.1", 50000), "server": ("test", 80)}
        await asyncio.wait_for(app(scope, self.receive, self.send), timeout)

    @property
    def start(self) -> Message:
        return self.messages[0]

    def events(self) -> list[tuple[str, int, dict[str, Any]]]:
        out = []
        for frame in b"".join(self.frames).decode().split("\n\n"):
            fields = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
            if "data" in fields:
                out.append((fields["event"], int(fields["id"]), json.loads(fields["data"])))
        return out


def test_stream_format_snapshot_then_ticks(runtime: Runtime) -> None:
    runtime.activations.activate("bind-fail-30pct", seed=3, ttl_seconds=30)
    app = app_for(runtime)
    client = Client(leave_when=lambda frames: len(frames) >= 4)
    asyncio.run(client.run(app))
    headers = dict(client.start["headers"])
    assert client.start["status"] == 200
    assert headers[b"content-type"] == b"text/event-stream; charset=utf-8"
    assert headers[b"cache-control"] == b"no-store" and b"content-length" not in headers
    assert client.frames[0] == b"retry: 1000\n\n"
    events = client.events()
    assert [e for e, _, _ in events] == ["snapshot", "tick", "tick"]
    assert [i for _, i, _ in events] == [1, 2, 3]
    snap = events[0][2]
    assert snap["active"]["profile"] == "bind-fail-30pct" and snap["active"]["seed"] == 3
    assert 0 < snap["active"]["remainingSeconds"] <= 30
    assert snap["rules"] == {"fail-binds": {"matched": 0, "eligible": 0, "injected": 0, "triggerSeen": 0}}
    assert [r["event"] for r in snap["journal"]] == ["activate"]
    assert set(events[1][2]) >= {"time", "totals", "rates", "connections", "outage", "journal", "library"}


def test_many_requests_become_a_few_updates(runtime: Runtime) -> None:
    app = app_for(runtime, interval=0.1)
    client = Client()

    async def scenario() -> None:
        stream = asyncio.ensure_future(client.run(app))
        loop = asyncio.get_running_loop()
        started = loop.time()
        while loop.time() - started < 1.0:
            for i in range(100):
                runtime.decide(get_pod(f"g{i}"))
            await asyncio.sleep(0.01)
        client.left.set()
        await stream

    asyncio.run(scenario())
    ticks = [data for event, _, data in client.events() if event == "tick"]
    assert runtime.counters.requests >= 2000
    assert 5 <= len(ticks) <= 11, len(ticks)  # ~10 at 0.1 s: a few a second, whatever the request rate
    assert ticks[-1]["totals"]["requests"] <= runtime.counters.requests
    assert max(t["rates"]["requests"] for t in ticks) > 500


@pytest.mark.parametrize("spec_version", ["2.3", "2.4"])
def test_a_client_that_disconnects_is_cleaned_up(runtime: Runtime, spec_version: str) -> None:
    app = app_for(runtime)
    feed: Feed = app.state.feed
    client = Client(leave_when=lambda frames: len(frames) >= 3, spec_version=spec_version)

    async def scenario() -> None:
        stay = Client()
        staying = asyncio.ensure_future(stay.run(app))
        await client.run(app)  # returns: the stream ended when the client left
        assert feed.subscribers == 1
        stay.left.set()
        await staying
        assert feed.subscribers == 0 and feed._task is None  # nobody listens: no more sampling

    asyncio.run(scenario())
    assert not any(m.get("more_body") is False for m in client.messages)


def test_closing_the_feed_ends_open_streams(runtime: Runtime) -> None:
    app = app_for(runtime, interval=3600)
    client = Client(leave_when=lambda frames: False)

    async def scenario() -> None:
        stream = asyncio.ensure_future(client.run(app))
        while len(client.frames) < 2:
            await asyncio.sleep(0.01)
        app.state.feed.close()  # what ControlServer.stop() does before uvicorn waits for responses
        await asyncio.wait_for(stream, 2)

    asyncio.run(scenario())
    assert client.messages[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


def test_stream_needs_the_token_when_one_is_set(runtime: Runtime) -> None:
    app = app_for(runtime, token="s3cret")
    refused = Client()
    asyncio.run(refused.run(app))
    assert refused.start["status"] == 401 and app.state.feed.subscribers == 0
    allowed = Client(leave_when=lambda frames: len(frames) >= 2, headers={"Authorization": "Bearer s3cret"})
    asyncio.run(allowed.run(app))
    assert allowed.start["status"] == 200 and allowed.events()[0][0] == "snapshot"


def test_ui_is_served_from_the_package_without_a_token(runtime: Runtime) -> None:
    c = TestClient(build_app(runtime, {}, token="s3cret"), follow_redirects=False)
    assert c.get("/").headers["location"] == "/ui/"
    assert c.get("/ui").headers["location"] == "/ui/"
    page = c.get("/ui/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert '<script src="app.js"' in page.text and "bind-fail-30pct" not in page.text  # no data in it
    assert "fetch(" in c.get("/ui/app.js").text and "EventSource" not in c.get("/ui/app.js").text
    for name in ("charts.js", "style.css"):
        assert c.get(f"/ui/{name}").status_code == 200
    assert c.get("/ui/feed.py").status_code == 404
    assert c.get("/ui/..%2Fapp.py").status_code == 404
    assert c.get("/v1/profiles").status_code == 401  # the data behind it still needs the token
    schema = c.get("/openapi.json", headers={"Authorization": "Bearer s3cret"}).json()
    assert "/ui/" not in schema["paths"]
    assert "/v1/events/stream" in schema["paths"]


def test_every_dashboard_file_is_served_and_shipped() -> None:
    from kube_fault_proxy.proxy.control import ui

    on_disk = {p.name for p in ui.UI_DIR.iterdir()}
    assert on_disk == set(ui.FILES)
    shipped = (ROOT / "pyproject.toml").read_text()
    for suffix in {Path(n).suffix for n in on_disk}:
        assert f'"ui/*{suffix}"' in shipped  # package-data: the page ships in the wheel
