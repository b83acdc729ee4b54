"""Certificates for the local control plane (a CA, the apiserver's serving cert, an admin client
cert, the service-account key), complete enough for strict RFC 5280 checks (Python 3.13's default)."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kube_fault_proxy.paths import private_dir, write_private


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _write(path: Path, data: bytes, private: bool = False) -> None:
    if private:
        write_private(path, data)  # 0600 from the first byte
    else:
        path.write_bytes(data)


def _usage(*, cert_sign: bool = False, key_encipherment: bool = False) -> x509.KeyUsage:
    return x509.KeyUsage(digital_signature=True, key_cert_sign=cert_sign, crl_sign=cert_sign,
                         content_commitment=False, key_encipherment=key_encipherment,
                         data_encipherment=False, key_agreement=False, encipher_only=False,
                         decipher_only=False)


def make(directory: Path) -> Path:
    """Write ca.crt/key, apiserver.crt/key, admin.crt/key, sa.key/pub; returns directory."""
    private_dir(directory)
    now = datetime.datetime.now(datetime.UTC)
    not_after = now + datetime.timedelta(days=365)
    ca_key = _key()
    ca_name = _name("kube-fault-proxy-local-ca")
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(not_after)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(_usage(cert_sign=True), critical=True)
          .add_extension(ca_ski, critical=False)
          .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
          .sign(ca_key, hashes.SHA256()))
    _write(directory / "ca.crt", ca.public_bytes(serialization.Encoding.PEM))
    _write(directory / "ca.key", _pem_key(ca_key), private=True)

    def issue(stem: str, subject: x509.Name, usage: x509.ObjectIdentifier,
              sans: list[x509.GeneralName] | None = None) -> None:
        key = _key()
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(not_after)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(_usage(key_encipherment=True), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                   .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
                                  critical=False))
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        _write(directory / f"{stem}.crt", cert.public_bytes(serialization.Encoding.PEM))
        _write(directory / f"{stem}.key", _pem_key(key), private=True)

    issue("apiserver", _name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
        x509.DNSName("localhost"), x509.DNSName("kubernetes"), x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"), x509.DNSName("kubernetes.default.svc.cluster.local"),
    ])
    issue("admin", _name("kfp-admin-cert", "system:masters"), ExtendedKeyUsageOID.CLIENT_AUTH)
    sa = _key()
    _write(directory / "sa.key", _pem_key(sa), private=True)
    _write(directory / "sa.pub", sa.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return directory
