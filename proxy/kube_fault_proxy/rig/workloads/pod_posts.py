"""The load's creation path: pod POSTs (and a wave's gate patches) over plain HTTP/1.1 keep-alive
connections (asyncio streams).

A POST costs lightkube (httpx2, a model per pod) ~1.2-1.9 ms of the load's CPU; written and read here
it costs ~0.25 ms, which leaves the two cores to the apiserver and etcd (the manual's
records: load clients). Only what a create needs: one request at a time per connection, the answer's
status and body read by Content-Length or chunks, a new connection when the server closes one. The
TLS context and credentials are lightkube's, derived from the same config as every other client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx2
from lightkube.config.client_adapter import BearerAuth, BearerTokenFileAuth, ConnectionParams

from kube_fault_proxy.kube.kubeapi import Kube


class Unreachable(Exception):
    """The connection failed or broke before an answer came."""


@dataclass(frozen=True)
class Endpoint:
    """Where POSTs go and what they carry: host, port, TLS context, the Authorization header (if any)."""

    host: str
    port: int
    tls: ssl.SSLContext | None
    authorization: str | None
    timeout: float

    @classmethod
    def of(cls, kube: Kube) -> Endpoint | None:
        """From the cluster's config; None when its credentials are not a static header or a client
        certificate (an exec plugin, say: lightkube then makes the POSTs)."""
        params = ConnectionParams(timeout=httpx2.Timeout(kube.timeout)).httpx_params(kube.config)
        auth, verify = params.get("auth"), params.get("verify")
        if auth is not None and not isinstance(auth, BearerAuth | BearerTokenFileAuth):
            return None
        url = urlsplit(str(params["base_url"]))
        if url.scheme == "https" and not isinstance(verify, ssl.SSLContext):
            return None
        header = None
        if auth is not None:  # a bearer token's flow is one step: the request with its header
            header = next(auth.auth_flow(httpx2.Request("GET", url.geturl()))).headers.get("authorization")
        tls = verify if url.scheme == "https" and isinstance(verify, ssl.SSLContext) else None
        return cls(url.hostname or "127.0.0.1", url.port or (443 if tls else 80), tls, header, kube.timeout)


class Connection:
    """One keep-alive connection, opened on first use and again after the server closes it."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self, path: str, doc: dict[str, Any]) -> tuple[int, bytes]:
        """POST a JSON document; (status, body). Raises Unreachable if no answer came."""
        return await self.send("POST", path, doc)

    async def send(self, method: str, path: str, doc: dict[str, Any],
                   content_type: str = "application/json") -> tuple[int, bytes]:
        """A request with a JSON body (a PATCH: `content_type` says which kind); (status, body)."""
        ep = self.endpoint
        body = json.dumps(doc, separators=(",", ":")).encode()
        head = (f"{method} {path} HTTP/1.1\r\nHost: {ep.host}:{ep.port}\r\nContent-Type: {content_type}\r\n"
                f"Accept: application/json\r\nUser-Agent: kube-fault-proxy-load\r\nContent-Length: {len(body)}\r\n"
                + (f"Authorization: {ep.authorization}\r\n" if ep.authorization else "") + "\r\n")
        try:
            return await asyncio.wait_for(self._exchange(head.encode() + body), ep.timeout)
        except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError,
                ValueError) as e:
            await self.close()
            raise Unreachable(f"{type(e).__name__}: {e}") from None

    async def _exchange(self, request: bytes) -> tuple[int, bytes]:
        if self.streams is None:
            ep = self.endpoint
            self.streams = await asyncio.open_connection(ep.host, ep.port, ssl=ep.tls,
                                                         server_hostname=ep.host if ep.tls else None)
        reader, writer = self.streams
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise ValueError(f"not an HTTP/1.1 answer: {lines[0][:40]!r}")
        status = int(parts[1])
        fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        if "chunked" in fields.get("transfer-encoding", "").lower():
            chunks = []
            while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
                chunks.append((await reader.readexactly(size + 2))[:-2])
            await reader.readuntil(b"\r\n")  # the last chunk's (empty) trailer
            body = b"".join(chunks)
        else:
            body = await reader.readexactly(int(fields.get("content-length", "0")))
        if fields.get("connection", "").lower() == "close":
            await self.close()
        return status, body

    async def close(self) -> None:
        """Close the connection, if open (the next POST opens a new one)."""
        if self.streams is not None:
            writer = self.streams[1]
            self.streams = None
            writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await writer.wait_closed()
