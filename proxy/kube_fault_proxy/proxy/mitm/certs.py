"""The proxy's CA: created once in its confdir and reused."""

from __future__ import annotations

from pathlib import Path

from mitmproxy import certs

from kube_fault_proxy.proxy.mitm.server import CA_CERT_FILE


def ensure_ca(confdir: Path) -> Path:
    """Create the CA if it does not exist yet; returns the certificate clients must trust."""
    confdir.mkdir(parents=True, exist_ok=True)
    certs.CertStore.from_store(confdir, "mitmproxy", 2048)
    return confdir / CA_CERT_FILE
