"""A gzip-encoded body read as it streams, for the scanners that only read it (never for what is sent on).

kube-apiserver 1.37 compresses a WatchList's stream (`sendInitialEvents=true`) when the client accepts gzip, which
Go's transport asks for by itself (feature gate `WatchListCompression`, Beta and on by default in 1.37 and 1.38:
`perFlushGzipWriter` in k8s.io/apiserver's `endpoints/handlers/watch.go`). Each flush closes its gzip writer, so
the body is gzip members one after another, and a member may be split across the chunks the proxy streams.
The standard library decodes one member at a time; this carries on with the next (what no library here does for
a stream fed in arbitrary pieces). The bytes passed on to the client are never these.
"""

from __future__ import annotations

import zlib

GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip header and trailer around the deflate data


class GzipMembers:
    """Decodes concatenated gzip members, chunk by chunk; after bytes that are not gzip, `failed` says why and
    nothing more is decoded."""

    __slots__ = ("_inflate", "failed")

    def __init__(self) -> None:
        self._inflate = zlib.decompressobj(GZIP_WBITS)
        self.failed: str | None = None

    def feed(self, data: bytes) -> bytes:
        """The decoded bytes this chunk completes (b"" while a member's data is still to come)."""
        if self.failed is not None or not data:
            return b""
        out: list[bytes] = []
        try:
            while data:
                out.append(self._inflate.decompress(data))
                if not self._inflate.eof:
                    break
                data = self._inflate.unused_data  # the next member's first bytes, if this chunk has them
                self._inflate = zlib.decompressobj(GZIP_WBITS)
        except zlib.error as e:
            self.failed = str(e)
        return b"".join(out)


def gzip_head(body: bytes, size: int) -> bytes | None:
    """The first `size` decoded bytes of a gzip body (an answer's, for its revision), or None if it is not gzip."""
    try:
        return zlib.decompressobj(GZIP_WBITS).decompress(body, size)
    except zlib.error:
        return None
