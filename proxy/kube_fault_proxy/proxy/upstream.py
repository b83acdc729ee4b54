"""The apiserver the proxy forwards to, read from a kubeconfig or given directly."""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml


class KubeconfigError(ValueError):
    """A kubeconfig the proxy cannot use; the message names the file and the field."""


@dataclass(frozen=True, slots=True)
class Upstream:
    """The apiserver: its URL, the CA that verifies it, and the identity the proxy presents."""

    url: str
    ca_file: Path | None = None
    client_pem: Path | None = None  # key + certificate chain in one PEM
    insecure: bool = False


@dataclass(frozen=True, slots=True)
class KubeconfigView:
    """The parts of one kubeconfig context the proxy cares about."""

    path: Path
    context: str
    cluster: dict[str, Any]
    user: dict[str, Any]

    @property
    def server(self) -> str:
        """The apiserver URL."""
        return str(self.cluster["server"])


def _named(doc: dict[str, Any], section: str, name: str, path: Path) -> dict[str, Any]:
    for item in doc.get(section) or []:
        if isinstance(item, dict) and item.get("name") == name:
            body = item.get(section[:-1])
            if isinstance(body, dict):
                return body
    raise KubeconfigError(f"{path}: {section}: no entry named {name!r}")


def read(path: Path, context: str | None = None) -> KubeconfigView:
    """Load a kubeconfig and pick a context (the current one by default)."""
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise KubeconfigError(f"{path}: cannot read kubeconfig: {e}") from None
    if not isinstance(doc, dict):
        raise KubeconfigError(f"{path}: not a kubeconfig (expected a mapping)")
    name = context or doc.get("current-context")
    if not name:
        raise KubeconfigError(f"{path}: current-context: not set (pass --context)")
    ctx = _named(doc, "contexts", name, path)
    cluster = _named(doc, "clusters", str(ctx.get("cluster")), path)
    user = _named(doc, "users", str(ctx.get("user")), path) if ctx.get("user") else {}
    if "server" not in cluster:
        raise KubeconfigError(f"{path}: clusters[{ctx.get('cluster')}].server: missing")
    return KubeconfigView(path, name, cluster, user)


def _data(view: KubeconfigView, section: dict[str, Any], key: str) -> bytes | None:
    """Inline `<key>-data` (base64) or the file `<key>`, resolved next to the kubeconfig."""
    if section.get(f"{key}-data"):
        return base64.b64decode(section[f"{key}-data"])
    if section.get(key):
        file = Path(section[key]).expanduser()
        file = file if file.is_absolute() else view.path.parent / file
        try:
            return file.read_bytes()
        except OSError as e:
            raise KubeconfigError(f"{view.path}: {key}: {e}") from None
    return None


Keep = Callable[[str, bytes], Path]  # stores a named secret, returns a path to it (PrivateFiles.put)


def upstream_from(view: KubeconfigView, keep: Keep) -> Upstream:
    """The Upstream for a kubeconfig; the CA and the client identity go where `keep` puts them."""
    ca = _data(view, view.cluster, "certificate-authority")
    cert = _data(view, view.user, "client-certificate")
    key = _data(view, view.user, "client-key")
    if (cert is None) != (key is None):
        raise KubeconfigError(f"{view.path}: users: client-certificate and client-key go together")
    return Upstream(
        url=view.server.rstrip("/"),
        ca_file=keep("upstream-ca.pem", ca) if ca else None,
        client_pem=keep("upstream-client.pem", key + b"\n" + cert)
        if key is not None and cert is not None
        else None,
        insecure=bool(view.cluster.get("insecure-skip-tls-verify")),
    )


def proxied(view: KubeconfigView, proxy_url: str, proxy_ca: bytes) -> dict[str, Any]:
    """A self-contained kubeconfig that reaches the same cluster through the proxy.

    The user entry is copied with files inlined: a bearer token passes through the proxy
    untouched; a client certificate is not needed (the proxy presents its own upstream).
    """
    user: dict[str, Any] = {}
    for key, value in view.user.items():
        if key in ("client-certificate", "client-key"):
            data = _data(view, view.user, key)
            user[f"{key}-data"] = base64.b64encode(data or b"").decode()
        elif key == "tokenFile":
            token = _data(view, view.user, "tokenFile")
            user["token"] = (token or b"").decode().strip()
        else:
            user[key] = value
    name = "kube-fault-proxy"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {
                    "server": proxy_url,
                    "certificate-authority-data": base64.b64encode(proxy_ca).decode(),
                },
            }
        ],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }
