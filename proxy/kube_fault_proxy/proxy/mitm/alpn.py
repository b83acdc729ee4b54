"""Choose HTTP/2 whenever a client offers it, as kube-apiserver (Go's server) does.

With upstream connections opened lazily (at a client's first request), mitmproxy cannot mirror the
apiserver's ALPN choice and takes the client's first preference; some clients (httpx) list
http/1.1 first. Go's server ranks by its own preference, h2 first, so a client that offers h2 gets
it from the apiserver: the proxy answers the same.
"""

from __future__ import annotations

from mitmproxy import ctx, tls

H2 = b"h2"


class PreferHttp2:
    """Settles the client's ALPN before mitmproxy's TLS setup reads it (must precede TlsConfig)."""

    def tls_clienthello(self, data: tls.ClientHelloData) -> None:
        offers = data.client_hello.alpn_protocols
        if ctx.options.http2 and H2 in offers and data.context.client.alpn is None:
            data.context.client.alpn = H2
