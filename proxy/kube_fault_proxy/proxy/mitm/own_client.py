"""The proxy's own client of the apiserver, for requests no client sent it (a late commit, a stale WatchList's
LIST): the upstream identity and trust every forwarded request uses, as the mitmproxy options say."""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
from mitmproxy import ctx
from mitmproxy.proxy import mode_specs

from kube_fault_proxy.proxy.upstream import Upstream

TIMEOUT_SECONDS = 60.0


def upstream() -> Upstream:
    """The apiserver this proxy forwards to, as its mitmproxy options say."""
    o = ctx.options
    url = str(mode_specs.ProxyMode.parse(o.mode[0]).data)
    return Upstream(url, Path(o.ssl_verify_upstream_trusted_ca) if o.ssl_verify_upstream_trusted_ca else None,
                    Path(o.client_certs) if o.client_certs else None, bool(o.ssl_insecure))


def client_for(to: Upstream) -> httpx.AsyncClient:
    """An HTTP client to the apiserver with the proxy's upstream identity and trust."""
    if to.insecure:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    else:
        context = ssl.create_default_context(cafile=str(to.ca_file) if to.ca_file else None)
    if to.client_pem is not None:
        context.load_cert_chain(str(to.client_pem))
    return httpx.AsyncClient(base_url=to.url, verify=context, timeout=TIMEOUT_SECONDS)


def own_client() -> httpx.AsyncClient:
    """A client of the apiserver this proxy forwards to (made inside a running proxy: it reads its options)."""
    return client_for(upstream())
