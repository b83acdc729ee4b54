"""The HTTP/2 stream limit on the wire, many requests on one connection, and the connection counters."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path

import h2.connection
import h2.events
import h2.settings
import httpx
import pytest

from tests.integration.test_request_faults import bind, pod
from tests.support.control import activate
from tests.support.processes import Started, start_fake_apiserver, start_proxy

MAX_STREAMS = h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS


def server_settings(proxy: Started) -> dict[int, int]:
    """Open a TLS connection with ALPN h2, send the preface, return the proxy's first SETTINGS."""
    ctx = ssl.create_default_context(cafile=proxy.ready["caFile"])
    ctx.set_alpn_protocols(["h2"])
    host, port = proxy.ready["proxyUrl"].removeprefix("https://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname=host) as tls:
        assert tls.selected_alpn_protocol() == "h2"
        conn = h2.connection.H2Connection()
        conn.initiate_connection()
        tls.sendall(conn.data_to_send())
        while True:
            data = tls.recv(65536)
            assert data, "the proxy closed the connection before its SETTINGS"
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RemoteSettingsChanged):
                    return {int(k): v.new_value for k, v in event.changed_settings.items()}


def test_the_proxy_advertises_4096_streams_by_default(proxy: Started) -> None:
    assert server_settings(proxy)[MAX_STREAMS] == 4096


def test_the_stream_limit_is_a_serve_option(upstream: Started, pki: Path, tmp_path: Path) -> None:
    started = start_proxy(upstream.extra["url"], pki, tmp_path, "--max-concurrent-streams", "250")
    try:
        assert server_settings(started)[MAX_STREAMS] == 250
    finally:
        assert started.stop() == 0, started.log.read_text()


def test_on_stock_mitmproxy_the_stream_limit_comes_with_the_first_answer(upstream: Started, pki: Path,
                                                                         tmp_path: Path) -> None:
    """--stock-mitmproxy skips the library change that advertises the limit in the first SETTINGS frame; the limit
    is then asked of hyper-h2 at the first request, and 150 concurrent streams (above h2's 100) all pass."""
    started = start_proxy(upstream.extra["url"], pki, tmp_path, "--stock-mitmproxy", "--max-concurrent-streams", "250")
    try:
        ctx = ssl.create_default_context(cafile=started.ready["caFile"])
        ctx.set_alpn_protocols(["h2"])
        host, port = started.ready["proxyUrl"].removeprefix("https://").rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as raw, \
                ctx.wrap_socket(raw, server_hostname=host) as tls:
            conn = h2.connection.H2Connection()
            conn.initiate_connection()
            limits: list[int] = []
            ended: set[int] = set()
            reset: set[int] = set()

            def request(stream_id: int) -> None:
                conn.send_headers(stream_id, [(":method", "GET"), (":scheme", "https"), (":authority", host),
                                              (":path", "/api/v1/namespaces/default/pods")], end_stream=True)

            def pump(until: Callable[[], bool]) -> None:
                while not until():
                    tls.sendall(conn.data_to_send())
                    data = tls.recv(65536)
                    assert data, "the proxy closed the connection"
                    for event in conn.receive_data(data):
                        if isinstance(event, h2.events.RemoteSettingsChanged) and MAX_STREAMS in event.changed_settings:
                            limits.append(event.changed_settings[MAX_STREAMS].new_value)
                        elif isinstance(event, h2.events.StreamEnded):
                            ended.add(event.stream_id)
                        elif isinstance(event, h2.events.StreamReset):
                            reset.add(event.stream_id)
                tls.sendall(conn.data_to_send())  # our acknowledgements

            request(1)
            pump(lambda: 1 in ended and 250 in limits)
            assert limits == [100, 250], "h2's own 100 first, then the limit with the first answer"
            many = [3 + 2 * i for i in range(150)]
            for stream_id in many:
                request(stream_id)
            pump(lambda: set(many) <= ended | reset)
            assert reset == set() and set(many) <= ended
    finally:
        assert started.stop() == 0, started.log.read_text()


def test_a_bad_stream_limit_is_a_usage_error(upstream: Started, pki: Path, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="exited with 2") as e:
        start_proxy(upstream.extra["url"], pki, tmp_path, "--max-concurrent-streams", "0")
    assert "--max-concurrent-streams must be 1.." in str(e.value)


def test_a_thousand_concurrent_requests_share_one_connection_each_side(proxy: Started,
                                                                       control: httpx.Client) -> None:
    before = control.get("/v1/stats").json()["connections"]

    async def burst() -> list[int]:
        limits = httpx.Limits(max_connections=1)
        async with httpx.AsyncClient(http2=True, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"],
                                     timeout=60, limits=limits) as c:
            names = [pod() for _ in range(1000)]
            body = {"kind": "Binding", "apiVersion": "v1", "target": {"kind": "Node", "name": "n1"}}
            rs = await asyncio.gather(*(c.post(f"/api/v1/namespaces/default/pods/{n}/binding",
                                               json={**body, "metadata": {"name": n}}) for n in names))
            return [r.status_code for r in rs]

    assert asyncio.run(burst()) == [201] * 1000
    after = control.get("/v1/stats").json()["connections"]
    assert after["clientAccepted"] - before["clientAccepted"] == 1
    assert after["upstreamOpened"] - before["upstreamOpened"] == 1
    assert control.get("/v1/stats").json()["bindsTotal"]["succeeded"] >= 1000


def test_connection_counters_follow_clients_coming_and_going(proxy: Started, control: httpx.Client) -> None:
    before = control.get("/v1/stats").json()["connections"]
    clients = [httpx.Client(http2=True, verify=proxy.ready["caFile"], base_url=proxy.ready["proxyUrl"], timeout=10)
               for _ in range(5)]
    try:
        for c in clients:
            assert bind(c, pod()).status_code == 201
        during = control.get("/v1/stats").json()["connections"]
        assert during["clientAccepted"] - before["clientAccepted"] == 5
        assert during["clientOpen"] - before["clientOpen"] == 5
        assert during["upstreamOpened"] - before["upstreamOpened"] == 5
    finally:
        for c in clients:
            c.close()
    # A client's upstream connection is closed (and counted closed) a moment after the client's own: wait for both.
    for _ in range(50):
        after = control.get("/v1/stats").json()["connections"]
        if (after["clientOpen"], after["upstreamOpen"]) == (before["clientOpen"], before["upstreamOpen"]):
            break
        time.sleep(0.1)
    assert after["clientOpen"] == before["clientOpen"]
    assert after["upstreamOpen"] == before["upstreamOpen"]
    metrics = control.get("/metrics").text
    assert f"kfp_client_connections_accepted_total {after['clientAccepted']}" in metrics
    assert f"kfp_upstream_connections_opened_total {after['upstreamOpened']}" in metrics


def test_slowloris_and_idle_clients_are_timed_out_like_the_apiserver_does(upstream: Started, pki: Path,
                                                                          tmp_path: Path) -> None:
    started = start_proxy(upstream.extra["url"], pki, tmp_path, "--read-header-timeout", "1s", "--idle-timeout", "2s")
    host, port = started.ready["proxyUrl"].removeprefix("https://").rsplit(":", 1)
    ca = ssl.create_default_context(cafile=started.ready["caFile"])
    events: list[str] = []

    def watch() -> None:  # 30 events over 6 s: a request that is open the whole time is never idle
        with httpx.Client(http2=True, verify=ca, base_url=started.ready["proxyUrl"], timeout=None) as c, \
                c.stream("GET", "/api/v1/pods", params={"watch": "1", "n": "30", "interval": "0.2"}) as r:
            events.extend(line for line in r.iter_lines() if line)

    try:
        watcher = threading.Thread(target=watch)
        watcher.start()
        with httpx.Client(http2=True, verify=ca, base_url=started.ready["proxyUrl"], timeout=10) as idle:
            assert idle.get("/healthz").status_code == 200  # then nothing for longer than the idle timeout
            tls = ssl.create_default_context(cafile=started.ready["caFile"])
            tls.set_alpn_protocols(["http/1.1"])
            t0 = time.monotonic()
            closed_at = None
            with socket.create_connection((host, int(port)), timeout=10) as raw, \
                    tls.wrap_socket(raw, server_hostname=host) as slow:
                slow.settimeout(0.25)
                while time.monotonic() - t0 < 6:  # one header byte every 0.25 s, never a whole request
                    try:
                        slow.sendall(b"G")
                        if slow.recv(1) == b"":
                            closed_at = time.monotonic() - t0
                            break
                    except TimeoutError:
                        continue
                    except (ssl.SSLError, OSError):
                        closed_at = time.monotonic() - t0
                        break
            assert closed_at is not None and 0.9 <= closed_at < 3.0, closed_at
            watcher.join(15)
        assert len(events) == 30
        with httpx.Client(base_url=started.ready["controlUrl"]) as control:
            timeouts = [r for r in control.get("/v1/journal", params={"since": 0}).json()["records"]
                        if r["event"] == "client-timeout"]
        reasons = sorted(r["reason"] for r in timeouts)
        assert [("read-header timeout" in r, "idle timeout" in r) for r in reasons] == [
            (False, True), (True, False)], reasons  # the idle client, the slow one; never the watcher
    finally:
        assert started.stop() == 0, started.log.read_text()


def test_clients_that_send_nothing_open_no_upstream_connection(proxy: Started, control: httpx.Client) -> None:
    before = control.get("/v1/stats").json()["connections"]
    host, port = proxy.ready["proxyUrl"].removeprefix("https://").rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=proxy.ready["caFile"])
    ctx.set_alpn_protocols(["h2"])
    socks = []
    try:
        for _ in range(50):  # finished TLS handshakes, then silence
            raw = socket.create_connection((host, int(port)), timeout=10)
            socks.append(ctx.wrap_socket(raw, server_hostname=host))
        during = control.get("/v1/stats").json()["connections"]
        assert during["clientAccepted"] - before["clientAccepted"] == 50
        assert during["upstreamOpened"] == before["upstreamOpened"]
    finally:
        for s in socks:
            s.close()


def test_a_client_offering_http1_first_still_gets_http2_as_from_the_apiserver(proxy: Started) -> None:
    ctx = ssl.create_default_context(cafile=proxy.ready["caFile"])
    ctx.set_alpn_protocols(["http/1.1", "h2"])
    host, port = proxy.ready["proxyUrl"].removeprefix("https://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname=host) as tls:
        assert tls.selected_alpn_protocol() == "h2"
    ctx.set_alpn_protocols(["http/1.1"])
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            ctx.wrap_socket(raw, server_hostname=host) as tls:
        assert tls.selected_alpn_protocol() == "http/1.1"


def test_an_answer_held_when_its_upstream_connection_closes_is_relayed_then_the_client_drained(
        pki: Path, tmp_path: Path) -> None:
    """A crash point holds a committed 201 for 2.5 s; the apiserver closes the idle upstream connection 1 s
    in. The held answer still reaches the client (before: the client connection was closed at once and the
    answer lost); once it is out the client is told GOAWAY and closed; its next request goes on a new
    connection. Deterministic: the stand-in closes idle connections after 1 s, well inside the hold."""
    up = start_fake_apiserver(pki, tmp_path / "up", idle_seconds=1.0)
    started = start_proxy(f"https://127.0.0.1:{up.ready['port']}", pki, tmp_path)
    try:
        with httpx.Client(base_url=started.ready["controlUrl"], timeout=10) as control, \
                httpx.Client(http2=True, verify=started.ready["caFile"], base_url=started.ready["proxyUrl"],
                             timeout=10) as c:
            activate(control, "crash", [{"name": "c", "match": {"subresources": ["binding"]},
                                         "fault": {"crashPoint": {"holdSeconds": 2.5}}}])
            t = time.monotonic()
            r = bind(c, pod())
            assert r.status_code == 201 and time.monotonic() - t >= 2.4, (r.status_code, r.text)
            deadline = time.monotonic() + 5
            while True:
                records = control.get("/v1/journal").json()["records"]
                names = [x["event"] for x in records if x["event"] in (
                    "crash-point", "upstream-lost", "crash-point-released", "upstream-lost-drained")]
                if "upstream-lost-drained" in names or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert names == ["crash-point", "upstream-lost", "crash-point-released", "upstream-lost-drained"], names
            [lost] = [x for x in records if x["event"] == "upstream-lost"]
            assert (lost["reason"], lost["heldAnswers"]) == ("upstream connection closed", 1)
            [drained] = [x for x in records if x["event"] == "upstream-lost-drained"]
            assert (drained["goaway"], drained["streamsCut"]) == (True, 0)
            [released] = [x for x in records if x["event"] == "crash-point-released"]
            assert released["outcome"] == "relayed"
            control.delete("/v1/active").raise_for_status()
            assert c.get("/healthz").status_code == 200  # a new connection: the drained one is closed
    finally:
        assert started.stop() == 0, started.log.read_text()
        up.stop()
