"""`stand-in`: a small HTTPS apiserver to try the proxy on a machine with no cluster.

It answers enough of the core API for a first fault to be seen: nodes and pods to list, pods to create, and
Binding POSTs, which bind a Pending pod once (a second Binding is a 409 Conflict, as the apiserver answers). It
requires a client certificate, like kube-apiserver, and writes a kubeconfig that has one, so `serve --kubeconfig`
and `kubeconfig --kubeconfig` take it as they take a real cluster's. Served by the standard library's threading
HTTP server over TLS (HTTP/1.1): a stand-in needs no framework, and the proxy speaks HTTP/2 to its clients either
way.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from kube_fault_proxy.paths import state_dir, write_private
from kube_fault_proxy.rig.cluster import pki

POD = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods(?:/(?P<name>[^/]+)(?P<binding>/binding)?)?$")
VERSION = {"major": "1", "minor": "36", "gitVersion": "v1.36.0-kube-fault-proxy-stand-in", "platform": "linux/amd64"}


def default_dir() -> Path:
    """Where the stand-in keeps its certificates and kubeconfig."""
    return state_dir() / "stand-in"


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure" if code >= 400 else "Success",
            "message": message, "reason": reason, "code": code}


class Cluster:
    """The stand-in's objects: nodes and pods, with a revision counter, guarded by one lock."""

    def __init__(self, nodes: int, pods: int) -> None:
        self.lock = threading.Lock()
        self.revision = 1
        self.nodes = [self._meta("Node", f"node-{i}", None) for i in range(nodes)]
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        for i in range(pods):
            self.add_pod("default", {"metadata": {"name": f"pod-{i}"}, "spec": {"containers": [{"name": "c"}]}})

    def _meta(self, kind: str, name: str, namespace: str | None) -> dict[str, Any]:
        self.revision += 1
        meta: dict[str, Any] = {"name": name, "uid": f"stand-in-{kind.lower()}-{name}",
                                "resourceVersion": str(self.revision)}
        if namespace:
            meta["namespace"] = namespace
        return {"kind": kind, "apiVersion": "v1", "metadata": meta}

    def add_pod(self, namespace: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Create a pod (Pending, no node); 409 if the name is taken."""
        name = str((body.get("metadata") or {}).get("name") or "")
        if not name:
            return 422, _status(422, "Invalid", "Pod is invalid: metadata.name: Required value")
        if (namespace, name) in self.pods:
            return 409, _status(409, "AlreadyExists", f'pods "{name}" already exists')
        pod = self._meta("Pod", name, namespace)
        pod["spec"] = body.get("spec") or {}
        pod["status"] = {"phase": "Pending"}
        self.pods[(namespace, name)] = pod
        return 201, pod

    def bind(self, namespace: str, name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """A Binding POST: 201 once, 409 if bound already, 404 for no such pod."""
        pod = self.pods.get((namespace, name))
        if pod is None:
            return 404, _status(404, "NotFound", f'pods "{name}" not found')
        node = str((body.get("target") or {}).get("name") or "")
        if not node:
            return 422, _status(422, "Invalid", "Binding is invalid: target.name: Required value")
        if pod["spec"].get("nodeName"):
            return 409, _status(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{name}": pod '
                                                 f'{name} is already assigned to node "{pod["spec"]["nodeName"]}"')
        self.revision += 1
        pod["spec"]["nodeName"] = node
        pod["metadata"]["resourceVersion"] = str(self.revision)
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def pod_list(self, namespace: str | None) -> dict[str, Any]:
        items = [p for (ns, _), p in sorted(self.pods.items()) if namespace in (None, ns)]
        return {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.revision)},
                "items": items}

    def node_list(self) -> dict[str, Any]:
        return {"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.revision)},
                "items": self.nodes}


class Handler(BaseHTTPRequestHandler):
    """One request: the routes of the core API the stand-in knows; 404 as a Status for the rest."""

    server: StandInServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def _answer(self, code: int, doc: dict[str, Any]) -> None:
        body = json.dumps(doc, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> dict[str, Any] | None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            doc = json.loads(raw or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        return doc if isinstance(doc, dict) else None

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        cluster = self.server.cluster
        with cluster.lock:
            if path in ("/healthz", "/readyz", "/livez"):
                body = b"ok"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return None
            if path == "/version":
                return self._answer(200, VERSION)
            if path == "/api/v1/nodes":
                return self._answer(200, cluster.node_list())
            if path == "/api/v1/pods":
                return self._answer(200, cluster.pod_list(None))
            match = POD.match(path)
            if match and not match["name"]:
                return self._answer(200, cluster.pod_list(match["ns"]))
            if match and not match["binding"]:
                pod = cluster.pods.get((match["ns"], match["name"]))
                return self._answer(200, pod) if pod else self._answer(
                    404, _status(404, "NotFound", f'pods "{match["name"]}" not found'))
        return self._answer(404, _status(404, "NotFound", "the server could not find the requested resource"))

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        match = POD.match(path)
        body = self._body()
        if body is None:
            return self._answer(400, _status(400, "BadRequest", "the body is not a JSON object"))
        cluster = self.server.cluster
        with cluster.lock:
            if match and match["binding"]:
                return self._answer(*cluster.bind(match["ns"], match["name"], body))
            if match and not match["name"]:
                return self._answer(*cluster.add_pod(match["ns"], body))
        return self._answer(405, _status(405, "MethodNotAllowed", "the stand-in does not serve this"))


class StandInServer(ThreadingHTTPServer):
    """The threading HTTP server with the stand-in's objects beside it."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], cluster: Cluster, verbose: bool = False) -> None:
        self.cluster = cluster
        self.verbose = verbose
        super().__init__(address, Handler)


def tls_context(certs: Path) -> ssl.SSLContext:
    """Serving TLS that asks every client for a certificate signed by the stand-in's CA, as kube-apiserver does."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(certs / "ca.crt"))
    ctx.load_cert_chain(str(certs / "apiserver.crt"), str(certs / "apiserver.key"))
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def write_kubeconfig(path: Path, server: str, certs: Path) -> Path:
    """A kubeconfig for the stand-in: its CA and the admin client certificate, inlined."""
    import base64

    def data(name: str) -> str:
        return base64.b64encode((certs / name).read_bytes()).decode()

    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "stand-in",
           "clusters": [{"name": "stand-in", "cluster": {"server": server,
                                                         "certificate-authority-data": data("ca.crt")}}],
           "users": [{"name": "stand-in", "user": {"client-certificate-data": data("admin.crt"),
                                                   "client-key-data": data("admin.key")}}],
           "contexts": [{"name": "stand-in", "context": {"cluster": "stand-in", "user": "stand-in",
                                                         "namespace": "default"}}]}
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_private(path, yaml.safe_dump(doc, sort_keys=False))  # it holds a client key


SHUTDOWN_SECONDS = 5.0


@contextmanager
def running(listen: tuple[str, int], directory: Path, nodes: int = 3, pods: int = 10,
            verbose: bool = False) -> Iterator[tuple[StandInServer, str]]:
    """The stand-in serving on a thread (certificates made in `directory` the first time); yields it and its URL."""
    certs = directory / "pki"
    if not (certs / "apiserver.crt").exists():
        pki.make(certs)
    server = StandInServer(listen, Cluster(nodes, pods), verbose)
    # The handshake happens on the request's own thread (on its first read), not in accept() on the serving
    # thread, where a client that connects and never finishes its handshake would hold up every other one and
    # shutdown() with them.
    server.socket = tls_context(certs).wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    host, port = server.server_address[:2]
    thread = threading.Thread(target=server.serve_forever, name="stand-in", daemon=True)
    thread.start()
    try:
        yield server, f"https://{host!s}:{port}"
    finally:
        stopping = threading.Thread(target=server.shutdown, name="stand-in-stop", daemon=True)
        stopping.start()
        stopping.join(SHUTDOWN_SECONDS)  # a request still stuck after that is left to the process's exit
        server.server_close()
