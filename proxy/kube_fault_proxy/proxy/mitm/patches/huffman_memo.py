"""Huffman strings decoded and encoded once (hpack's decode_huffman and HuffmanEncoder.encode, memoised).

What it replaces: the name `decode_huffman` in `hpack.hpack`, and `hpack.huffman.HuffmanEncoder.encode`.
Why: hpack decodes the same header names and values (`content-type`, the scheduler's user agent, …) with
a table walk per byte, on every request; here decoded strings are memoised (strings up to 256 bytes, up to
4,096 of them, the table emptied when full); and encoded the same way, once per string (hpack's encoder
shifts a big integer per byte).

What it bought: part of issue 23's second round (callgrind, Binding POSTs one at a time: 5.62 -> 4.75 M
instructions per request for the round's changes together; see the performance record).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import hpack.hpack
import hpack.huffman
import hpack.huffman_constants
import hpack.huffman_table

PINNED = {
    "hpack.huffman_table.decode_huffman": "cc3f7f031fb93b35",
    "hpack.hpack.Decoder._decode_literal": "c071434241dd65a1",
    "hpack.huffman.HuffmanEncoder.encode": "b046627be1fa017c",
}
ORIGINALS: dict[str, Any] = {
    "hpack.huffman_table.decode_huffman": hpack.huffman_table.decode_huffman,
    "hpack.hpack.Decoder._decode_literal": hpack.hpack.Decoder._decode_literal,
    "hpack.huffman.HuffmanEncoder.encode": hpack.huffman.HuffmanEncoder.encode,
}
_ORIGINAL_DECODE = vars(hpack.hpack)["decode_huffman"]  # hpack.hpack's own name for it

HUFFMAN_MEMO_ENTRIES = 4096
HUFFMAN_MEMO_LENGTH = 256
_huffman_memo: dict[bytes, bytes] = {}


def _decode_huffman(data: bytes, _decode: Callable[[bytes], bytes] = _ORIGINAL_DECODE) -> bytes:
    """hpack's decode_huffman, memoised for short strings (an error is raised again, never remembered)."""
    if (hit := _huffman_memo.get(data)) is not None:
        return hit
    decoded = _decode(data)
    if len(data) <= HUFFMAN_MEMO_LENGTH:
        if len(_huffman_memo) >= HUFFMAN_MEMO_ENTRIES:
            _huffman_memo.clear()
        _huffman_memo[bytes(data)] = decoded
    return decoded


_huffman_encoded: dict[bytes, bytes] = {}


def _huffman_encode(self: hpack.huffman.HuffmanEncoder, data: bytes | None,
                    _encode: Callable[..., bytes] = ORIGINALS["hpack.huffman.HuffmanEncoder.encode"]) -> bytes:
    """hpack's HuffmanEncoder.encode, memoised for short strings under HPACK's own code (RFC 7541 B)."""
    if self.huffman_code_list is not hpack.huffman_constants.REQUEST_CODES or not data:
        return _encode(self, data)
    if (hit := _huffman_encoded.get(data)) is not None:
        return hit
    encoded = _encode(self, data)
    if len(data) <= HUFFMAN_MEMO_LENGTH:
        if len(_huffman_encoded) >= HUFFMAN_MEMO_ENTRIES:
            _huffman_encoded.clear()
        _huffman_encoded[bytes(data)] = encoded
    return encoded


def apply(target: Any) -> None:
    """Decode and encode short Huffman strings once (idempotent)."""
    vars(hpack.hpack)["decode_huffman"] = _decode_huffman
    hpack.huffman.HuffmanEncoder.encode = _huffman_encode  # type: ignore[method-assign,assignment]


def revert() -> None:
    """hpack's own decoding and encoding back, the memos emptied."""
    vars(hpack.hpack)["decode_huffman"] = _ORIGINAL_DECODE
    hpack.huffman.HuffmanEncoder.encode = ORIGINALS["hpack.huffman.HuffmanEncoder.encode"]  # type: ignore[method-assign]
    _huffman_memo.clear()
    _huffman_encoded.clear()
