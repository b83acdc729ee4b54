"""A small TLS + HTTP/2 stand-in for kube-apiserver, for protocol corner cases in tests.

Run: python -m tests.support.fake_apiserver --certs DIR --ready-file FILE [--require-client-cert]
It serves just enough of the API (bindings, a pod list, a watch, byte payloads, whoami) to
observe on the wire what the proxy did; a Binding POST with `?delay=S` is committed only if its
client is still there S seconds later, as the apiserver drops a request whose connection died (another create with
`?delay=S` is answered S seconds later, if its client is still there); one
with `?throttle=S` is not committed but answered 429 with `Retry-After: S`, as API Priority and
Fairness rejects it; a WatchList (`sendInitialEvents=true`) to a client that accepts gzip is gzipped a member per
event, as kube-apiserver 1.37 does. The real apiserver is used by the cluster tests.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import json
import random
import socket
import ssl
import urllib.parse
from pathlib import Path
from typing import Any

from hypercorn.asyncio import serve
from hypercorn.config import Config

Scope = dict[str, Any]
bindings: dict[str, str] = {}
binding_posts: list[str] = []
bindings_cancelled: list[str] = []


def _status(code: int, reason: str, message: str) -> bytes:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {},
                       "status": "Failure" if code >= 400 else "Success", "message": message,
                       "reason": reason, "code": code}).encode()


async def _read_body(receive: Any) -> bytes:
    body = b""
    while True:
        msg = await receive()
        body += msg.get("body", b"")
        if not msg.get("more_body"):
            return body


async def _send(send: Any, status: int, body: bytes, ctype: str = "application/json",
                extra: list[tuple[bytes, bytes]] | None = None) -> None:
    headers = [(b"content-type", ctype.encode()), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": body})


async def _disconnected_within(receive: Any, seconds: float) -> bool:
    """Wait up to `seconds` for the client to go away; whether it did."""
    try:
        async with asyncio.timeout(seconds):
            while (await receive())["type"] != "http.disconnect":
                pass
    except TimeoutError:
        return False
    return True


def payload(size: int, seed: int) -> bytes:
    """Deterministic pseudo-random bytes, for byte-for-byte checks."""
    return random.Random(seed).randbytes(size)


async def app(scope: Scope, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    path: str = scope["path"]
    method: str = scope["method"]
    query = dict(p.split("=", 1) if "=" in p else (p, "") for p in
                 scope["query_string"].decode().split("&") if p)
    headers = {k.decode(): v.decode() for k, v in scope["headers"]}
    body = await _read_body(receive)
    parts = path.strip("/").split("/")

    if method == "POST" and len(parts) == 7 and parts[-1] == "binding":
        ns, pod = parts[3], parts[5]
        target = json.loads(body).get("target", {}).get("name", "")
        binding_posts.append(f"{ns}/{pod}")
        if f"{ns}/{pod}" in bindings:
            node = bindings[f"{ns}/{pod}"]
            msg = (f'Operation cannot be fulfilled on pods/binding "{pod}": '
                   f'pod {pod} is already assigned to node "{node}"')
            return await _send(send, 409, _status(409, "Conflict", msg))
        if "throttle" in query:  # APF's own answer: plain text, nothing committed
            return await _send(send, 429, b"Too many requests, please try again later.\n",
                               "text/plain; charset=utf-8", [(b"retry-after", query["throttle"].encode())])
        if "delay" in query and await _disconnected_within(receive, float(query["delay"])):
            # Like the apiserver: a request whose connection died before it was committed is not.
            bindings_cancelled.append(f"{ns}/{pod}")
            return None
        bindings[f"{ns}/{pod}"] = target
        return await _send(send, 201, json.dumps(
            {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}).encode())
    if method == "POST" and path.startswith("/api/v1/namespaces/"):  # a create: the object back, as it came
        if "delay" in query and await _disconnected_within(receive, float(query["delay"])):
            return None  # ?delay=S: answered S s later, if its client is still there
        return await _send(send, 201, body)
    if method == "DELETE" and path.startswith("/api/v1/namespaces/"):  # as for a ConfigMap: a Status, no revision
        return await _send(send, 200, json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {},
                                                  "status": "Success", "details": {"name": parts[-1]}}).encode())
    if path == "/debug/bindings":
        return await _send(send, 200, json.dumps({"bound": bindings, "posts": binding_posts,
                                                  "cancelled": bindings_cancelled}).encode())
    if path == "/whoami":
        cert = scope.get("extensions", {}).get("tls", {}).get("client_cert_name")
        who = {"authorization": headers.get("authorization"), "clientCert": cert,
               "userAgent": headers.get("user-agent"), "host": headers.get("host")}
        return await _send(send, 200, json.dumps(who).encode())
    if path == "/bytes":
        data = payload(int(query.get("size", "1024")), int(query.get("seed", "0")))
        extra = [(b"x-sha256", hashlib.sha256(data).hexdigest().encode())]
        return await _send(send, 200, data, "application/octet-stream", extra)
    if path == "/slow":  # a request the apiserver takes its time over (in flight at an outage)
        await asyncio.sleep(float(query.get("seconds", "1")))
        return await _send(send, 200, b"slow", "text/plain")
    if path == "/echo":
        return await _send(send, 200, body, headers.get("content-type", "application/octet-stream"))
    if path == "/api/v1/pods" and query.get("watch") in ("1", "true"):
        n, interval = int(query.get("n", "5")), float(query.get("interval", "0.2"))
        ctype = query.get("ctype", "application/json").replace("%2F", "/").replace("%3B", ";").replace("%3D", "=")
        limit = float(query.get("timeoutSeconds", "3600"))
        started = asyncio.get_running_loop().time()
        # As kube-apiserver 1.37 (WatchListCompression): a WatchList to a client that accepts gzip is gzipped,
        # each flush (here: each event) a gzip member of its own.
        gzipped = query.get("sendInitialEvents") == "true" and "gzip" in headers.get("accept-encoding", "")
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", ctype.encode()), (b"transfer-encoding", b"chunked"),
                                (b"x-timeout-seconds", query.get("timeoutSeconds", "").encode()),
                                (b"x-query", scope["query_string"]),
                                *([(b"content-encoding", b"gzip")] if gzipped else [])]})
        objects = int(query.get("objects", "0"))  # events about this many pods, round robin (0: one pod each)
        first = int(query.get("firstRevision", "100"))  # the first event's resourceVersion
        initial = int(query.get("initialEvents", "0"))  # this many events, then the initial-events-end BOOKMARK
        for i in range(n):
            if asyncio.get_running_loop().time() - started >= limit:
                break
            name = f"p{i % objects if objects else i}"
            event = {"type": "ADDED" if not objects or i < objects else "MODIFIED",
                     "object": {"kind": "Pod", "apiVersion": "v1",
                                "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                                             "resourceVersion": str(first + i)}}}
            line = json.dumps(event, separators=(",", ":")).encode() + b"\n"
            if i + 1 == initial:  # a WatchList's initial events end: the annotated BOOKMARK at the last one's revision
                line += json.dumps({"type": "BOOKMARK", "object": {
                    "kind": "Pod", "apiVersion": "v1", "metadata": {
                        "resourceVersion": str(first + i), "annotations": {"k8s.io/initial-events-end": "true"}}}},
                    separators=(",", ":")).encode() + b"\n"
            await send({"type": "http.response.body", "more_body": True,
                        "body": gzip.compress(line, mtime=0) if gzipped else line})
            await asyncio.sleep(interval)
        await asyncio.sleep(float(query.get("linger", "0")))  # a quiet stream, still open
        return await send({"type": "http.response.body", "body": b""})
    if path.startswith("/api/v1/") and method == "GET":
        # A LIST at a past revision as the apiserver answers it (resourceVersionMatch=Exact): that revision as the
        # list's own, or 410 for one "compacted" (below 50); `metadata.name=` field selectors honoured. The query
        # it got comes back in x-query.
        raw = scope["query_string"]
        rv = query.get("resourceVersion", "") if query.get("resourceVersionMatch") == "Exact" else "99"
        if rv.isdigit() and int(rv) < 50:
            return await _send(send, 410, _status(410, "Expired", "The resourceVersion for the provided list is "
                                                                  "too old."), extra=[(b"x-query", raw)])
        items = [{"metadata": {"name": f"p{i}", "namespace": "default", "resourceVersion": str(90 + i)}}
                 for i in range(3)]
        selector = urllib.parse.unquote(query.get("fieldSelector", ""))
        if selector.startswith("metadata.name="):
            items = [i for i in items if i["metadata"]["name"] == selector.removeprefix("metadata.name=")]
        return await _send(send, 200, json.dumps({"kind": "PodList", "apiVersion": "v1",
                                                  "metadata": {"resourceVersion": rv},
                                                  "items": items}, separators=(",", ":")).encode(),
                           extra=[(b"x-query", raw)])
    if path in ("/healthz", "/readyz"):
        return await _send(send, 200, b"ok", "text/plain")
    await _send(send, 404, _status(404, "NotFound", "the server could not find the requested resource"))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--certs", type=Path, required=True, help="dir with server.pem, server.key, ca.pem")
    p.add_argument("--ready-file", type=Path, required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--require-client-cert", action="store_true")
    p.add_argument("--idle-seconds", type=float, default=3600.0,
                   help="close a connection idle this long (hypercorn's keep-alive timeout; its own default, 5 s, "
                        "would race any test that holds an answer about that long)")
    args = p.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    config = Config()
    config.bind = [f"fd://{sock.fileno()}"]
    config.certfile = str(args.certs / "server.pem")
    config.keyfile = str(args.certs / "server.key")
    config.ca_certs = str(args.certs / "ca.pem")
    config.verify_mode = ssl.CERT_REQUIRED if args.require_client_cert else ssl.CERT_OPTIONAL
    config.alpn_protocols = ["h2", "http/1.1"]
    config.loglevel = "WARNING"
    config.accesslog = None
    config.keep_alive_timeout = args.idle_seconds
    args.ready_file.write_text(json.dumps({"port": sock.getsockname()[1]}))
    asyncio.run(serve(app, config))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
