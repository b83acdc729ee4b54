"""The HTTP/2 stream limit through hyper-h2's own settings, where the library change that advertises it from a
connection's first frame (`patches/stream_limit.py`) is not applied: `--stock-mitmproxy`, or a pinned source
that differs. At a client connection's first request its hyper-h2 connection is asked, through hyper-h2's public
`update_settings`, for the limit; the SETTINGS frame goes out with the proxy's next frames on that connection
(the first answer), and once the client acknowledges it the limit holds. Until then the client has hyper-h2's
100 streams, which a client's first requests (its lists and watches) stay under."""

from __future__ import annotations

import logging

import h2.exceptions
import h2.settings
from mitmproxy import connection, http

from kube_fault_proxy.proxy.mitm.patches import internals

log = logging.getLogger(__name__)
MAX_CONCURRENT_STREAMS = h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS


class StreamSettings:
    """Raise each HTTP/2 client connection's stream limit to `limit` at its first request."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.told: set[str] = set()  # client connections already asked

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        client = flow.client_conn.id
        if client in self.told or flow.request.http_version != "HTTP/2.0":
            return
        self.told.add(client)
        h = internals.handler(internals.proxyserver(), client)
        conn = None if h is None else internals.client_h2(h)
        if conn is None:
            return
        try:
            conn.update_settings({MAX_CONCURRENT_STREAMS: self.limit})
        except h2.exceptions.ProtocolError:  # the connection is closing: nothing left to raise
            log.debug("stream limit not raised on a closing connection %s", client)

    def client_disconnected(self, client: connection.Client) -> None:
        self.told.discard(client.id)
