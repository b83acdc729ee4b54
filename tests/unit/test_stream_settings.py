"""The HTTP/2 stream limit on stock mitmproxy (proxy.mitm.stream_settings): asked of hyper-h2 once per client
connection, at its first HTTP/2 request. The wire (a real serve, 150 streams above h2's 100) is
tests/integration/test_connections.py's."""

from __future__ import annotations

from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
from kube_fault_proxy.proxy.mitm import stream_settings
from kube_fault_proxy.proxy.mitm.stream_settings import StreamSettings
from mitmproxy import http
from mitmproxy.test import tflow

MAX_STREAMS = h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> h2.connection.H2Connection:
    """The proxy's side of a client's HTTP/2 connection, as internals finds it for any client."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    conn.initiate_connection()
    conn.clear_outbound_data_buffer()
    monkeypatch.setattr(stream_settings.internals, "proxyserver", lambda: None)
    monkeypatch.setattr(stream_settings.internals, "handler", lambda server, client_id: object())
    monkeypatch.setattr(stream_settings.internals, "client_h2", lambda h: conn)
    return conn


def h2_flow() -> http.HTTPFlow:
    flow = tflow.tflow()
    flow.request.http_version = "HTTP/2.0"
    return flow


def sent_limits(conn: h2.connection.H2Connection) -> list[int]:
    """The MAX_CONCURRENT_STREAMS values of the SETTINGS frames the connection has to send, as a client reads them."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    client.initiate_connection()
    server_preface = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    server_preface.initiate_connection()
    events: list[Any] = client.receive_data(server_preface.data_to_send() + conn.data_to_send())
    return [e.changed_settings[MAX_STREAMS].new_value for e in events
            if isinstance(e, h2.events.RemoteSettingsChanged) and MAX_STREAMS in e.changed_settings]


def test_the_first_request_of_a_connection_asks_hyper_h2_for_the_limit(server: h2.connection.H2Connection) -> None:
    addon = StreamSettings(4096)
    flow = h2_flow()
    addon.requestheaders(flow)
    assert sent_limits(server) == [100, 4096]  # the preface's own 100, then the limit
    addon.requestheaders(h2_flow())  # another client connection (tflow makes a new one): asked again
    addon.requestheaders(flow)  # the same connection: once is enough
    assert sent_limits(server) == [100, 4096]
    assert len(addon.told) == 2


def test_an_http1_request_and_a_gone_client_ask_nothing(server: h2.connection.H2Connection) -> None:
    addon = StreamSettings(4096)
    flow = tflow.tflow()  # HTTP/1.1
    addon.requestheaders(flow)
    assert sent_limits(server) == [100] and not addon.told
    flow = h2_flow()
    addon.requestheaders(flow)
    addon.client_disconnected(flow.client_conn)
    assert not addon.told


def test_a_closing_connection_is_left_alone(server: h2.connection.H2Connection) -> None:
    server.close_connection()
    StreamSettings(4096).requestheaders(h2_flow())  # hyper-h2 refuses new settings now: no error escapes
