"""The load's own POSTs: answers read by length or chunks, a closed connection reopened, a broken one reported."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import pytest
from kube_fault_proxy.kube.kubeapi import Kube
from kube_fault_proxy.rig.workloads import pod_posts

ENDPOINT = pod_posts.Endpoint("127.0.0.1", 6443, None, "Bearer t0k", 5.0)


class Writer:
    """A stream writer that keeps what was written."""

    def __init__(self) -> None:
        self.sent, self.closed = b"", False

    def write(self, data: bytes) -> None:
        self.sent += data

    def close(self) -> None:
        self.closed = True

    async def wait_closed(self) -> None:
        return None


def exchange(answer: bytes, doc: dict[str, Any] | None = None) -> tuple[tuple[int, bytes] | str, Writer, bool]:
    """POST once over a connection whose server answers `answer`; (result or error, writer, still open)."""
    async def go() -> tuple[tuple[int, bytes] | str, Writer, bool]:
        reader, writer = asyncio.StreamReader(), Writer()
        reader.feed_data(answer)
        reader.feed_eof()
        conn = pod_posts.Connection(ENDPOINT)
        conn.streams = (reader, writer)  # type: ignore[assignment]
        try:
            got: tuple[int, bytes] | str = await conn.post("/api/v1/namespaces/n/pods", doc or {"kind": "Pod"})
        except pod_posts.Unreachable as e:
            got = f"unreachable: {e}"
        return got, writer, conn.streams is not None
    return asyncio.run(go())


def test_a_post_carries_the_document_and_the_token() -> None:
    got, writer, open_ = exchange(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}", {"kind": "Pod", "n": 1})
    assert got == (201, b"{}") and open_
    head, _, body = writer.sent.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /api/v1/namespaces/n/pods HTTP/1.1\r\n") and b"\r\nAuthorization: Bearer t0k" in head
    assert body == b'{"kind":"Pod","n":1}' and f"Content-Length: {len(body)}".encode() in head


@pytest.mark.parametrize(
    ("answer", "expected", "open_"),
    [
        (b"HTTP/1.1 409 Conflict\r\ncontent-length: 3\r\n\r\nabc", (409, b"abc"), True),
        (b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
         (201, b"abcde"), True),
        (b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", (429, b""), False),
        (b"HTTP/1.1 201 Created\r\nContent-Length: 10\r\n\r\nabc", "unreachable: IncompleteReadError", False),
        (b"", "unreachable: IncompleteReadError", False),
        (b"garbage\r\n\r\n", "unreachable: ValueError: not an HTTP/1.1 answer", False),
    ],
)
def test_answers(answer: bytes, expected: tuple[int, bytes] | str, open_: bool) -> None:
    got, writer, still_open = exchange(answer)
    assert got == expected if isinstance(expected, tuple) else str(got).startswith(expected), got
    assert still_open is open_ and writer.closed is not open_


def test_the_endpoint_comes_from_the_clusters_config(tmp_path: Any) -> None:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256()))
    ca = tmp_path / "ca.crt"
    ca.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    ep = pod_posts.Endpoint.of(Kube.from_token("https://127.0.0.1:6443", "s3cret", ca))
    assert ep is not None and (ep.host, ep.port, ep.authorization) == ("127.0.0.1", 6443, "Bearer s3cret")
    assert isinstance(ep.tls, ssl.SSLContext)
