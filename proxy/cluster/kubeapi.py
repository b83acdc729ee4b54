"""A small synchronous client for the apiserver, for the harness (not for the things under test)."""

from __future__ import annotations

import ssl
import time
from pathlib import Path
from typing import Any

import httpx


class ApiError(RuntimeError):
    """A request the apiserver refused."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status


class Api:
    """JSON over HTTP/2 with a bearer token (or a client certificate) and the cluster CA."""

    def __init__(self, server: str, token: str | None, ca_file: Path | None, timeout: float = 30.0,
                 client_pem: Path | None = None, insecure: bool = False) -> None:
        if insecure:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            ctx = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        if client_pem is not None:
            ctx.load_cert_chain(str(client_pem))
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.server, self._ssl, self._headers, self._timeout = server, ctx, headers, timeout
        self.client = self._new_client()

    def _new_client(self) -> httpx.Client:
        return httpx.Client(base_url=self.server, http2=True, verify=self._ssl, timeout=self._timeout,
                            headers=self._headers, limits=httpx.Limits(max_connections=4, max_keepalive_connections=4))

    @classmethod
    def from_kubeconfig(cls, path: Path, context: str | None = None, timeout: float = 30.0) -> Api:
        """A client for a kubeconfig's current (or given) context."""
        from proxy.private_files import PrivateFiles
        from proxy.upstream import read, upstream_from

        view = read(path, context)
        token = view.user.get("token")
        if not token and view.user.get("tokenFile"):
            token = Path(view.user["tokenFile"]).read_text().strip()
        # The TLS context reads the CA and the key when it is built; they are forgotten right after.
        with PrivateFiles() as files:
            upstream = upstream_from(view, files.put)
            return cls(upstream.url, token, upstream.ca_file, timeout, upstream.client_pem, upstream.insecure)

    def clone(self) -> Api:
        """Another client with the same server and credentials, for another thread: an HTTP/2
        connection's state is not safe to share between threads."""
        twin = object.__new__(Api)
        twin.server, twin._ssl, twin._headers, twin._timeout = self.server, self._ssl, self._headers, self._timeout
        twin.client = twin._new_client()
        return twin

    def async_client(self) -> httpx.AsyncClient:
        """An asyncio client with the same server, credentials and CA (for load)."""
        return httpx.AsyncClient(base_url=self.server, http2=True, verify=self._ssl, timeout=self._timeout,
                                 headers=self._headers)

    def close(self) -> None:
        """Close the connection."""
        self.client.close()

    def request(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None,
                content_type: str = "application/json", ok_statuses: tuple[int, ...] = ()) -> Any:
        """One call; raises ApiError unless 2xx or in ok_statuses."""
        kw: dict[str, Any] = {"params": params}
        if body is not None:
            kw["json"] = body
            kw["headers"] = {"Content-Type": content_type}
        r = self.client.request(method, path, **kw)
        if r.status_code >= 300 and r.status_code not in ok_statuses:
            try:
                message = r.json().get("message", r.text)
            except ValueError:
                message = r.text
            raise ApiError(r.status_code, str(message))
        return r.json() if r.content and r.headers.get("content-type", "").startswith("application/json") else r.text

    def get(self, path: str, **params: Any) -> Any:
        """GET with query parameters."""
        return self.request("GET", path, params=params or None)

    def create(self, path: str, obj: dict[str, Any], exist_ok: bool = False) -> Any:
        """POST an object (409 AlreadyExists is fine with exist_ok)."""
        return self.request("POST", path, obj, ok_statuses=(409,) if exist_ok else ())

    def wait_ready(self, timeout: float) -> None:
        """Until /readyz says ok."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                if self.client.get("/readyz").text == "ok":
                    return
            except httpx.HTTPError as e:
                last = str(e)
            time.sleep(0.1)
        raise TimeoutError(f"apiserver not ready after {timeout:.0f}s {last}")
