"""The local control plane's certificates pass strict X.509 verification (Python 3.13's default),
proved by a TLS handshake in memory (no sockets) in both directions."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
from cryptography import x509
from kube_fault_proxy.rig.cluster import pki


def strict(ctx: ssl.SSLContext) -> ssl.SSLContext:
    ctx.verify_flags |= ssl.VERIFY_X509_STRICT | ssl.VERIFY_X509_PARTIAL_CHAIN
    return ctx


def handshake(client: ssl.SSLContext, server: ssl.SSLContext, hostname: str) -> ssl.SSLObject:
    """Run a TLS handshake between two contexts over memory BIOs; returns the client side."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    c = client.wrap_bio(c_in, c_out, server_hostname=hostname)
    s = server.wrap_bio(s_in, s_out, server_side=True)
    done = {"c": False, "s": False}
    for _ in range(20):
        for name, side in (("c", c), ("s", s)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            return c
    raise AssertionError("handshake did not finish")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pki.make(tmp_path_factory.mktemp("pki"))


@pytest.mark.parametrize("hostname", ["127.0.0.1", "localhost", "kubernetes.default.svc"])
def test_mutual_tls_under_strict_verification(certs: Path, hostname: str) -> None:
    client = strict(ssl.create_default_context(cafile=str(certs / "ca.crt")))
    client.load_cert_chain(str(certs / "admin.crt"), str(certs / "admin.key"))
    server = strict(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER))
    server.load_cert_chain(str(certs / "apiserver.crt"), str(certs / "apiserver.key"))
    server.load_verify_locations(str(certs / "ca.crt"))
    server.verify_mode = ssl.CERT_REQUIRED
    side = handshake(client, server, hostname)
    assert side.getpeercert()["subject"] == ((("commonName", "kube-apiserver"),),)


def test_extensions_a_strict_verifier_looks_for(certs: Path) -> None:
    ca = x509.load_pem_x509_certificate((certs / "ca.crt").read_bytes())
    ca_ski = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    for stem in ("apiserver", "admin"):
        cert = x509.load_pem_x509_certificate((certs / f"{stem}.crt").read_bytes())
        aki = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
        assert aki.key_identifier == ca_ski.digest
        basic = cert.extensions.get_extension_for_class(x509.BasicConstraints)
        assert basic.critical and not basic.value.ca
        assert cert.extensions.get_extension_for_class(x509.KeyUsage).critical
        cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)


def test_keys_are_private(certs: Path) -> None:
    assert certs.stat().st_mode & 0o777 == 0o700
    for key in ("ca.key", "apiserver.key", "admin.key", "sa.key"):
        assert (certs / key).stat().st_mode & 0o777 == 0o600, key
