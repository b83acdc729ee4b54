"""proxy.mitm.patches' wire changes (context_fork, option_reads, authority_memo, frame_repr, header_checks,
huffman_memo, encoder_table): each change answers exactly as the library does (checked against the library's own
code on the same inputs), and every function it replaces, wraps or reproduces is pinned, so that an
upgrade that changes one fails here, loudly."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterator
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.stream
import h2.utilities
import hpack
import hpack.hpack
import pytest
from h2.exceptions import ProtocolError
from hpack.huffman import HuffmanEncoder
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH
from hypothesis import given, settings
from hypothesis import strategies as st
from kube_fault_proxy.proxy.mitm import patches
from kube_fault_proxy.proxy.mitm.patches import (
    authority_memo,
    context_fork,
    encoder_table,
    frame_repr,
    header_checks,
    huffman_memo,
    option_reads,
)
from mitmproxy import connection, options
from mitmproxy.net.http import url
from mitmproxy.proxy import context

# Every library function the wire changes replace, wrap or reproduce: each module pins its source (PINNED, the
# sha256 in mitmproxy 12.3.1, h2 4.4.1 and hpack 4.2.0). When an upgrade changes one: re-read it, carry the change
# into its module of proxy/mitm/patches, then update the pin there.
PINNED_NAMES = {
    "mitmproxy.proxy.context.Context.fork", "mitmproxy.proxy.context.Context.__init__",
    "mitmproxy.optmanager._Option.current", "mitmproxy.optmanager._Option.default",
    "mitmproxy.net.http.url.parse_authority", "h2.connection.H2Connection._receive_frame",
    "h2.utilities.validate_headers", "h2.utilities._reject_illegal_characters", "h2.utilities._reject_empty_header_names",
    "h2.utilities._reject_te", "h2.utilities._reject_connection_header", "h2.utilities._reject_pseudo_header_fields",
    "h2.utilities._check_host_authority_header", "h2.utilities._validate_host_authority_header",
    "h2.utilities._check_path_header", "h2.stream.H2Stream._process_received_headers",
    "hpack.huffman_table.decode_huffman", "hpack.huffman.HuffmanEncoder.encode", "hpack.hpack.Encoder.__init__",
    "hpack.table.HeaderTable.add", "hpack.table.HeaderTable.search", "hpack.table.HeaderTable._shrink",
    "hpack.table.HeaderTable.maxsize", "hpack.hpack.Decoder._decode_literal",
}


WIRE = (context_fork, option_reads, authority_memo, frame_repr, header_checks, huffman_memo, encoder_table)


def install_wire() -> None:
    for change in WIRE:
        change.apply(None)


def uninstall_wire() -> None:
    for change in WIRE:
        change.revert()


def test_every_replaced_function_is_pinned_and_unchanged() -> None:
    assert {name for change in WIRE for name in change.PINNED} == PINNED_NAMES
    assert {patches.name_of(c): patches.mismatch(c) for c in WIRE} == {patches.name_of(c): None for c in WIRE}, (
        "a library changed what proxy/mitm/patches relies on: re-read it, then update the pins")
    # `repr` in h2.connection is the lazy one: only _receive_frame's trace may call it
    assert inspect.getsource(h2.connection).count("repr(") == 1


@pytest.fixture(autouse=True)
def installed() -> Iterator[None]:
    install_wire()
    yield
    install_wire()  # the proxy's state, whatever a test did


def test_a_forked_context_is_the_libraries_fork_without_a_new_server() -> None:
    client = connection.Client(peername=("127.0.0.1", 1), sockname=("127.0.0.1", 2), timestamp_start=1.0)
    parent = context.Context(client, options.Options())
    parent.layers = ["a", "b"]  # type: ignore[list-item]
    mine = parent.fork()
    theirs = context_fork.ORIGINALS["mitmproxy.proxy.context.Context.fork"](parent)
    assert vars(mine).keys() == vars(theirs).keys() == {"client", "options", "server", "layers"}
    for c in (mine, theirs):
        assert c.client is client and c.options is parent.options and c.server is parent.server
        assert c.layers == ["a", "b"] and c.layers is not parent.layers


def test_option_reads_copy_what_deepcopy_copies_and_nothing_else() -> None:
    opts = options.Options()
    opts.update(listen_host="127.0.0.1", mode=["reverse:https://127.0.0.1:1@127.0.0.1:0"], tcp_timeout=3600)  # type: ignore[no-untyped-call]
    for name in ("listen_host", "mode", "tcp_timeout", "confdir", "ignore_hosts", "http2", "client_certs",
                 "ssl_insecure"):  # set and unset; str, list, int, bool, None
        option = opts._options[name]
        assert option_reads._current(option) == option_reads.ORIGINALS["mitmproxy.optmanager._Option.current"](option)
    assert opts.mode == opts._options["mode"].value and opts.mode is not opts._options["mode"].value
    assert opts.ignore_hosts is not opts._options["ignore_hosts"]._default  # lists: still a copy the caller may change
    assert opts.listen_host is opts._options["listen_host"].value  # a str: itself, as deepcopy gives


@pytest.mark.parametrize("authority,check", [
    ("127.0.0.1:6443", True), (b"127.0.0.1:6443", True), ("[::1]:8443", True), ("example.com", True),
    ("kube-apiserver.kube-system.svc:443", False), ("bad host:1", True), ("a..b", True), ("x:99999", True),
])
def test_an_authority_parses_as_mitmproxy_parses_it_every_time(authority: str | bytes, check: bool) -> None:
    def outcome(parse: Any) -> Any:
        try:
            return parse(authority, check)
        except ValueError as e:
            return ("ValueError", str(e))
    expected = outcome(authority_memo.ORIGINALS["mitmproxy.net.http.url.parse_authority"])
    assert outcome(url.parse_authority) == expected
    assert outcome(url.parse_authority) == expected  # memoised answers, errors raised again


def test_a_frame_repr_is_formatted_only_when_a_logger_prints_it(caplog: pytest.LogCaptureFixture) -> None:
    formatted: list[str] = []

    class Frame:
        def __repr__(self) -> str:
            formatted.append("repr")
            return "HeadersFrame(stream_id=1)"
    lazy = h2.connection.repr(Frame())  # type: ignore[attr-defined]
    h2.config.DummyLogger().trace("Received frame: %s", lazy)
    assert formatted == []
    logger = logging.getLogger("kfp-test-h2")
    with caplog.at_level(logging.DEBUG - 1, logger="kfp-test-h2"):
        logger.log(logging.DEBUG - 1, "Received frame: %s", lazy)
    assert caplog.messages == ["Received frame: HeadersFrame(stream_id=1)"] and formatted  # formatted once printed


def _outcome(validate: Any, headers: list[tuple[bytes, bytes]], flags: h2.utilities.HeaderValidationFlags) -> Any:
    """What a validator yields before it stops, and how it stops."""
    seen: list[Any] = []
    try:
        for h in validate(iter(headers), flags):
            seen.append(h)
    except ProtocolError as e:
        return seen, ("ProtocolError", str(e))
    return seen, None


NAMES = [b":method", b":path", b":scheme", b":authority", b":status", b":protocol", b":custom", b"host",
         b"content-type", b"te", b"connection", b"transfer-encoding", b"user-agent", b"Accept", b"", b"x:y",
         b"a b", b"\x7fz", b"\xff", b"ok-name"]
VALUES = [b"", b"GET", b"POST", b"CONNECT", b"/", b"https", b"127.0.0.1:6443", b"other:1", b"trailers",
          b"TRAILERS", b"gzip", b" lead", b"trail\t", b"a\x00b", b"a\nb", b"a\rb", b"200", b"application/json",
          b"websocket"]
FLAGS = [h2.utilities.HeaderValidationFlags(client, trailer, response, push)
         for client in (False, True) for trailer in (False, True) for response in (False, True) for push in (False,)]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.sampled_from(NAMES), st.binary(max_size=6)),
                          st.one_of(st.sampled_from(VALUES), st.binary(max_size=6))), max_size=9),
       st.sampled_from(FLAGS))
def test_header_checks_stop_where_h2s_stop_with_its_error(headers: list[tuple[bytes, bytes]],
                                                          flags: h2.utilities.HeaderValidationFlags) -> None:
    assert _outcome(header_checks.validate_headers, headers, flags) == _outcome(
        header_checks.ORIGINALS["h2.utilities.validate_headers"], headers, flags)


def test_header_checks_pass_a_real_request_and_keep_the_tuples() -> None:
    block = [hpack.HeaderTuple(b":method", b"POST"), hpack.HeaderTuple(b":scheme", b"https"),
             hpack.HeaderTuple(b":authority", b"127.0.0.1:6443"),
             hpack.HeaderTuple(b":path", b"/api/v1/namespaces/default/pods/p-1/binding"),
             hpack.HeaderTuple(b"content-type", b"application/json"), hpack.HeaderTuple(b"user-agent", b"yunikorn")]
    flags = h2.utilities.HeaderValidationFlags(False, False, False, False)
    out = list(header_checks.validate_headers(iter(block), flags))
    assert out == block and all(a is b for a, b in zip(out, block, strict=True))


def test_an_h2_server_receives_headers_through_the_one_pass_checks() -> None:
    """Through hyper-h2 itself: a request is received as before, a bad one is refused with h2's own error."""
    calls: list[int] = []
    original = header_checks.validate_headers

    def counting(headers: Any, flags: Any) -> Any:
        calls.append(1)
        return original(headers, flags)
    vars(h2.stream)["validate_headers"] = counting
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    client.initiate_connection()
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    client.send_headers(1, [(":method", "GET"), (":scheme", "https"), (":authority", "127.0.0.1:1"), (":path", "/x")],
                        end_stream=True)
    received = [e for e in server.receive_data(client.data_to_send()) if isinstance(e, h2.events.RequestReceived)]
    assert calls == [1] and received and (b":path", b"/x") in received[0].headers
    bad = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, validate_outbound_headers=False))
    fresh = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    bad.initiate_connection()
    fresh.initiate_connection()
    fresh.receive_data(bad.data_to_send())
    bad.send_headers(1, [(":method", "GET"), (":scheme", "https"), (":authority", "a"), (":path", ""),
                         ("Upper", "x")], end_stream=True)
    with pytest.raises(ProtocolError, match="An empty :path header is forbidden"):
        fresh.receive_data(bad.data_to_send())


def test_huffman_strings_decode_as_hpack_decodes_them_and_are_memoised_bounded() -> None:
    encoder, decoder = hpack.Encoder(), hpack.Decoder()
    huffman_memo._huffman_memo.clear()
    headers: list[Any] = [(":method", "POST"), ("user-agent", "yunikorn/v1.9.0 (linux/amd64) kubernetes/$Format"),
               ("content-type", "application/vnd.kubernetes.protobuf")]
    block = encoder.encode(headers)
    assert decoder.decode(block) == headers
    assert b"application/vnd.kubernetes.protobuf" in huffman_memo._huffman_memo.values()
    again = hpack.Encoder().encode(headers)  # a fresh table: the literals (and their Huffman strings) again
    assert hpack.Decoder().decode(again) == headers
    uninstall_wire()
    assert hpack.Decoder().decode(hpack.Encoder().encode(headers)) == headers  # hpack's own, for the record
    install_wire()
    huffman = HuffmanEncoder(REQUEST_CODES, REQUEST_CODES_LENGTH)
    for i in range(huffman_memo.HUFFMAN_MEMO_ENTRIES + 10):
        huffman_memo._decode_huffman(huffman.encode(b"v%d" % i))
    assert len(huffman_memo._huffman_memo) <= huffman_memo.HUFFMAN_MEMO_ENTRIES
    with pytest.raises(hpack.HPACKDecodingError):
        huffman_memo._decode_huffman(b"\xff\xff\xff\xff")  # an EOS code in the string: hpack's own error
    assert b"\xff\xff\xff\xff" not in huffman_memo._huffman_memo


def test_install_and_uninstall() -> None:
    uninstall_wire()
    assert context.Context.fork is context_fork.ORIGINALS["mitmproxy.proxy.context.Context.fork"] and "repr" not in vars(h2.connection)
    assert vars(h2.stream)["validate_headers"] is h2.utilities.validate_headers
    assert vars(hpack.hpack)["decode_huffman"] is huffman_memo._ORIGINAL_DECODE
    install_wire()
    install_wire()
    assert context.Context.fork is context_fork._fork and vars(h2.stream)["validate_headers"] is header_checks.validate_headers
    assert url.parse_authority is authority_memo._parse_authority and vars(hpack.hpack)["decode_huffman"] is huffman_memo._decode_huffman


OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.sampled_from([b":path", b"audit-id", b"content-type", b"date", b"x", b"accept"]),
              st.sampled_from([b"", b"/a", b"/b", b"application/json", b"1", b"2", b"v" * 60, b"w" * 5000])),
    st.tuples(st.just("resize"), st.sampled_from([0, 1, 64, 200, 4096])),
    st.tuples(st.just("search"), st.sampled_from([b":path", b"audit-id", b"content-type", b"x", b":method", b"y"]),
              st.sampled_from([b"/a", b"/b", b"/", b"application/json", b"1", b"GET", b"v" * 60]))), max_size=60)


@settings(max_examples=2000, deadline=None)
@given(OPS)
def test_the_indexed_table_answers_every_search_as_hpacks_table(ops: list[tuple[Any, ...]]) -> None:
    mine, theirs = encoder_table.IndexedHeaderTable(), hpack.table.HeaderTable()
    for op in ops:
        if op[0] == "add":
            mine.add(op[1], op[2])
            theirs.add(op[1], op[2])
        elif op[0] == "resize":
            mine.maxsize = theirs.maxsize = op[1]
        else:
            assert mine.search(op[1], op[2]) == theirs.search(op[1], op[2])
        assert mine.dynamic_entries == theirs.dynamic_entries and mine._current_size == theirs._current_size


HEADER_SETS = st.lists(st.lists(st.tuples(
    st.sampled_from([":status", "audit-id", "content-type", "date", "cache-control", "x-kubernetes-pf-flowschema-uid",
                     "content-length", "user-agent", "authorization", "cookie"]),
    st.one_of(st.sampled_from(["200", "201", "application/json", "no-cache, private", "yunikorn/v1.9.0"]),
              st.text(alphabet="abcdef0123456789-", max_size=40))), max_size=8), max_size=12)


@settings(max_examples=500, deadline=None)
@given(HEADER_SETS, st.sampled_from([None, 0, 256, 4096]))
def test_header_blocks_encode_to_the_same_bytes_as_hpacks_encoder(blocks: list[list[tuple[str, str]]],
                                                                   resize: int | None) -> None:
    uninstall_wire()
    theirs = hpack.Encoder()
    install_wire()
    mine = hpack.Encoder()
    assert isinstance(mine.header_table, encoder_table.IndexedHeaderTable)
    decoder = hpack.Decoder()
    for i, block in enumerate(blocks):
        if resize is not None and i == len(blocks) // 2:
            mine.header_table_size = theirs.header_table_size = resize
        encoded = mine.encode(block)
        assert encoded == theirs.encode(block)
        assert decoder.decode(encoded) == block
