"""The kubeconfig files `cluster up` writes for each client of the local control plane (0600: they hold tokens)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from kube_fault_proxy.paths import write_private


def kubeconfig(server: str, ca: Path | bytes, user: dict[str, Any]) -> dict[str, Any]:
    """One context `kfp`: the server, the CA to trust (a file, or its bytes inline) and the user's credentials."""
    cluster: dict[str, Any] = {"server": server}
    if isinstance(ca, Path):
        cluster["certificate-authority"] = str(ca)
    else:
        cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
    return {"apiVersion": "v1", "kind": "Config", "current-context": "kfp",
            "clusters": [{"name": "kfp", "cluster": cluster}],
            "users": [{"name": "kfp", "user": user}],
            "contexts": [{"name": "kfp", "context": {"cluster": "kfp", "user": "kfp", "namespace": "default"}}]}


def write(path: Path, server: str, ca: Path | bytes, user: dict[str, Any]) -> Path:
    """Write one kubeconfig (private); its path."""
    return write_private(path, yaml.safe_dump(kubeconfig(server, ca, user), sort_keys=False))
