"""Test PKI: a CA, a server certificate for 127.0.0.1, and a client certificate."""

from __future__ import annotations

from pathlib import Path

import trustme


def make_pki(directory: Path) -> Path:
    """Write ca.pem, server.pem/.key and client.pem/.key into directory; returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.private_key_pem.write_to_path(str(directory / "server.key"))
    (directory / "server.pem").write_bytes(b"".join(b.bytes() for b in server.cert_chain_pems))
    client = ca.issue_cert("scheduler@example.test", common_name="system:kube-scheduler")
    client.private_key_pem.write_to_path(str(directory / "client.key"))
    (directory / "client.pem").write_bytes(b"".join(b.bytes() for b in client.cert_chain_pems))
    return directory
