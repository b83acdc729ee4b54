"""Concatenated gzip members read as they stream (kube-apiserver 1.37's compressed WatchList: a member per flush)."""

from __future__ import annotations

import gzip
import zlib

from hypothesis import given
from hypothesis import strategies as st
from kube_fault_proxy.proxy.gzip_members import GzipMembers, gzip_head


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=8), st.lists(st.integers(0, 10_000), max_size=12))
def test_members_split_anywhere_decode_to_what_was_flushed(flushes: list[bytes], cuts: list[int]) -> None:
    body = b"".join(gzip.compress(f, mtime=0) for f in flushes)
    decoder = GzipMembers()
    got = b"".join(decoder.feed(chunk) for chunk in _split(body, cuts))
    assert got == b"".join(flushes) and decoder.failed is None


def test_a_member_is_decoded_as_its_bytes_come_not_only_at_its_end() -> None:
    """The apiserver flushes a member whole, but the proxy may see half of it: what deflate gives out is passed on
    (a watch event is read as soon as it is whole), the rest follows with the member's remainder."""
    event = b'{"type":"ADDED","object":{"metadata":{"resourceVersion":"7"}}}\n' * 50
    member = gzip.compress(event, compresslevel=1, mtime=0)
    decoder = GzipMembers()
    first = decoder.feed(member[:len(member) // 2])
    assert 0 < len(first) < len(event) and event.startswith(first)
    assert first + decoder.feed(member[len(member) // 2:]) == event


def test_bytes_that_are_not_gzip_stop_the_decoding_and_say_why() -> None:
    decoder = GzipMembers()
    good = gzip.compress(b"one\n", mtime=0)
    assert decoder.feed(good) == b"one\n"
    assert decoder.feed(b"not gzip at all") == b"" and decoder.failed is not None and "header" in decoder.failed
    assert decoder.feed(good) == b"", "nothing more is decoded after a failure"


def test_the_head_of_a_gzip_answer_is_its_first_bytes_decoded() -> None:
    body = gzip.compress(b'{"kind":"PodList","metadata":{"resourceVersion":"42"}' + b" " * 100_000 + b"}", mtime=0)
    assert gzip_head(body, 40) == b'{"kind":"PodList","metadata":{"resourceV'
    assert gzip_head(b"\x1f\x8b not gzip", 40) is None
    assert gzip_head(zlib.compress(b"deflate, no gzip header"), 40) is None
