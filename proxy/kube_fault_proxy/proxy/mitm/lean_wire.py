"""Per-request work in hyper-h2, hpack and mitmproxy done once, or in one pass (issue 23, second round).

What `bench/scheduler --sample-proxy` and a Binding-POST load showed, each change exact in what it
answers (the same values, the same errors with the same messages, in the same order):

1. **A stream's context without a throwaway `Server`.** mitmproxy's `Context.fork()` (once per
   HTTP request) builds a new `Context`, whose constructor makes a `connection.Server` — a dataclass
   with a uuid4 id and a `__setattr__` hook per field — only for `fork()` to replace it with the
   parent's the next line: 3.5 % of the proxy's samples. Here the fork copies the three fields.
2. **Option reads without copies of immutable values.** Every `options.x` read deep-copies the
   value (and the default first, when unset): `check_body_size` alone reads two options per
   request. `copy.deepcopy` of a str, bytes, int, float, bool or None is that same object, so here
   those are returned as they are; lists, sets and the rest are still copied.
3. **An authority parsed once.** mitmproxy's `url.parse_authority` validates the same
   `127.0.0.1:port` (IDNA decode, label regexes) on every request; here its answers are memoised
   (bounded; a `ValueError` is not memoised, so it is raised again every time).
4. **Frame reprs only when logged.** hyper-h2's `_receive_frame` formats `repr(frame)` for a
   `trace` call its default logger drops: here `repr` in `h2.connection` returns a placeholder that
   formats the frame only if a logger does print it (mitmproxy's debug logger does).
5. **Inbound header checks in one pass.** hyper-h2 validates a received header block through seven
   chained generators, and tests every byte of names and values in a Python loop. Here one
   generator makes the same checks in the same order (per header: characters, empty name, `te`,
   connection headers, pseudo-headers, Host/:authority, empty :path; after the last header: the
   pseudo-header set, then Host/:authority), with the byte tests as regular expressions that find
   the same first offending byte. `tests/unit/test_lean_wire.py` checks it against hyper-h2's own
   on generated header blocks, valid and not.
6. **Huffman strings decoded once.** hpack decodes the same header names and values (`content-type`,
   the scheduler's user agent, …) with a table walk per byte, on every request; here decoded strings
   are memoised (strings up to 256 bytes, up to 4,096 of them, the table emptied when full); and
   encoded the same way, once per string (hpack's encoder shifts a big integer per byte).
7. **The encoder's table searched by key.** hpack's encoder looks each header it sends up in its
   dynamic table by walking every entry (a miss — an `audit-id`, a `:path`, a `date` — walks them
   all): 2.7 % of the samples in a YuniKorn wave. Here the encoder's table also keeps, per (name,
   value) and per name, its newest entry; a search answers from those (checked against the entry
   at that index; anything else walks the table as hpack does) with the same index hpack's walk
   finds first.

Each relies on the library's code as it is: `tests/unit/test_lean_wire.py` pins the source of every
function replaced, wrapped or reproduced and fails loudly when an upgrade changes one.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Generator, Iterable
from typing import Any

import h2.connection
import h2.stream
import h2.utilities
import hpack.hpack
import hpack.huffman
import hpack.huffman_constants
import hpack.table
from h2.exceptions import ProtocolError
from mitmproxy import optmanager
from mitmproxy.net.http import url
from mitmproxy.proxy import context

# What is replaced, wrapped or reproduced, by qualified name: test_lean_wire.py pins each one's source.
REPLACED = (
    "mitmproxy.proxy.context.Context.fork",
    "mitmproxy.proxy.context.Context.__init__",
    "mitmproxy.optmanager._Option.current",
    "mitmproxy.optmanager._Option.default",
    "mitmproxy.net.http.url.parse_authority",
    "h2.connection.H2Connection._receive_frame",
    "h2.utilities.validate_headers",
    "h2.utilities._reject_illegal_characters",
    "h2.utilities._reject_empty_header_names",
    "h2.utilities._reject_te",
    "h2.utilities._reject_connection_header",
    "h2.utilities._reject_pseudo_header_fields",
    "h2.utilities._check_host_authority_header",
    "h2.utilities._validate_host_authority_header",
    "h2.utilities._check_path_header",
    "h2.stream.H2Stream._process_received_headers",
    "hpack.huffman_table.decode_huffman",
    "hpack.hpack.Decoder._decode_literal",
    "hpack.huffman.HuffmanEncoder.encode",
    "hpack.hpack.Encoder.__init__",
    "hpack.table.HeaderTable.add",
    "hpack.table.HeaderTable.search",
    "hpack.table.HeaderTable._shrink",
    "hpack.table.HeaderTable.maxsize",
)

_ORIGINAL: dict[str, Any] = {
    "fork": context.Context.fork,
    "current": optmanager._Option.current,
    "parse_authority": url.parse_authority,
    "validate_headers": vars(h2.stream)["validate_headers"],  # h2.stream's own name for it
    "decode_huffman": vars(hpack.hpack)["decode_huffman"],  # hpack.hpack's own name for it
    "huffman_encode": hpack.huffman.HuffmanEncoder.encode,
    "encoder_init": hpack.hpack.Encoder.__init__,
}

# --- 1. Context.fork --------------------------------------------------------------------------------


def _fork(self: context.Context) -> context.Context:
    """mitmproxy 12.3's Context.fork, without constructing the Server it overwrites."""
    ret = context.Context.__new__(context.Context)
    ret.client = self.client
    ret.options = self.options
    ret.server = self.server
    ret.layers = self.layers.copy()
    return ret


# --- 2. option reads ----------------------------------------------------------------------------------

_IMMUTABLE = frozenset({str, bytes, int, float, bool, type(None)})  # deepcopy returns these as they are


def _current(self: optmanager._Option) -> Any:
    """mitmproxy 12.3's _Option.current: a deep copy of the value (or of the default), unless it is
    immutable, where the copy is the value itself."""
    v = self._default if self.value is optmanager.unset else self.value
    return v if type(v) in _IMMUTABLE else copy.deepcopy(v)


# --- 3. authorities -----------------------------------------------------------------------------------

_parse_authority = functools.lru_cache(maxsize=256)(_ORIGINAL["parse_authority"])

# --- 4. frame reprs -----------------------------------------------------------------------------------


class _LazyRepr:
    """repr(obj), formatted only when a logger prints it."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __str__(self) -> str:
        return repr(self.obj)

    __repr__ = __str__


# --- 5. inbound header checks -------------------------------------------------------------------------

# hyper-h2's per-byte tests: a name byte in 0x00-0x20, 0x41-0x5a (upper case) or 0x7f-0xff; a value
# byte NUL, LF or CR. `search` finds the same first offending byte that h2's loop stops at.
_BAD_NAME_BYTE = re.compile(rb"[\x00-\x20\x41-\x5a\x7f-\xff]")
_BAD_VALUE_BYTE = re.compile(rb"[\x00\n\r]")
_SIGIL = h2.utilities.SIGIL
_CONNECTION_HEADERS = h2.utilities.CONNECTION_HEADERS
_ALLOWED_PSEUDO = h2.utilities._ALLOWED_PSEUDO_HEADER_FIELDS
_pseudo_acceptable = h2.utilities._check_pseudo_header_field_acceptability
_WHITESPACE = (0x20, 0x09)


def validate_headers(headers: Iterable[Any], flags: h2.utilities.HeaderValidationFlags) -> Generator[Any, None, None]:
    """hyper-h2 4.4's validate_headers pipeline as one generator: the same checks, the same errors, in the
    same order (each header goes through every check before the next is read, as through the chain)."""
    request = not (flags.is_response_header or flags.is_trailer)
    seen_pseudo: set[bytes] = set()
    seen_regular = False
    method = None
    authority = host = None
    for header in headers:
        name, value = header[0], header[1]
        # _reject_illegal_characters
        if (bad := _BAD_NAME_BYTE.search(name)) is not None:
            c = name[bad.start()]
            if 0x41 <= c <= 0x5a:
                raise ProtocolError(f"Received uppercase header name {name!r}.")
            raise ProtocolError(f"Illegal character '{chr(c)}' in header name: {name!r}")
        if name.find(b":", 1) != -1:
            raise ProtocolError(f"Illegal character ':' in header name: {name!r}")
        if value:
            if (bad := _BAD_VALUE_BYTE.search(value)) is not None:
                raise ProtocolError(f"Illegal character '{chr(value[bad.start()])}' in header value: {value!r}")
            if value[0] in _WHITESPACE or value[-1] in _WHITESPACE:
                raise ProtocolError(f"Received header value surrounded by whitespace {value!r}")
        # _reject_empty_header_names
        if len(name) == 0:
            raise ProtocolError("Received header name with zero length.")
        # _reject_te
        if name == b"te" and value.lower() != b"trailers":
            raise ProtocolError(f"Invalid value for TE header: {value!r}")
        # _reject_connection_header
        if name in _CONNECTION_HEADERS:
            raise ProtocolError(f"Connection-specific header field present: {name!r}.")
        # _reject_pseudo_header_fields
        if name[0] == _SIGIL:
            if name in seen_pseudo:
                raise ProtocolError(f"Received duplicate pseudo-header field {name!r}")
            seen_pseudo.add(name)
            if seen_regular:
                raise ProtocolError(f"Received pseudo-header field out of sequence: {name!r}")
            if name not in _ALLOWED_PSEUDO:
                raise ProtocolError(f"Received custom pseudo-header field {name!r}")
            if name == b":method":
                method = value
        else:
            seen_regular = True
        if request:
            # _validate_host_authority_header
            if name == b":authority":
                authority = value
            elif name == b"host":
                if host is not None:
                    raise ProtocolError("Request header block has multiple Host headers.")
                host = value
            # _check_path_header
            if name == b":path" and not value:
                raise ProtocolError("An empty :path header is forbidden")
        yield header
    _pseudo_acceptable(seen_pseudo, method, flags)
    if request:
        if authority is None and host is None:
            raise ProtocolError("Request header block does not have an :authority or Host header.")
        if authority is not None and host is not None and authority != host:
            raise ProtocolError("Request header block has mismatched :authority and "
                                f"Host headers: {authority!r} / {host!r}")


# --- 6. Huffman strings -------------------------------------------------------------------------------

HUFFMAN_MEMO_ENTRIES = 4096
HUFFMAN_MEMO_LENGTH = 256
_huffman_memo: dict[bytes, bytes] = {}


def _decode_huffman(data: bytes, _decode: Callable[[bytes], bytes] = _ORIGINAL["decode_huffman"]) -> bytes:
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
                    _encode: Callable[..., bytes] = _ORIGINAL["huffman_encode"]) -> bytes:
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


# --- 7. the encoder's table -------------------------------------------------------------------------


class IndexedHeaderTable(hpack.table.HeaderTable):
    """hpack's HeaderTable that also knows, per (name, value) and per name, its newest dynamic entry.

    Entries are numbered as they are added (`_added`): the entry numbered n sits at position
    `_added - 1 - n` of `dynamic_entries` (new ones go in front, old ones leave from the back). An
    evicted entry leaves the index if it was the newest with its key (no older one is left then).
    A table cleared by a resize leaves numbers behind: a search checks the entry at the index it
    found, and walks the table as hpack does when it is not the one."""

    def __init__(self) -> None:
        super().__init__()
        self._added = 0
        self._newest: dict[tuple[bytes, bytes], int] = {}
        self._newest_named: dict[bytes, int] = {}

    def add(self, name: bytes, value: bytes) -> None:
        """hpack 4.2's HeaderTable.add, numbering the entry it adds."""
        size = hpack.table.table_entry_size(name, value)
        if size > self._maxsize:
            self.dynamic_entries.clear()
            self._current_size = 0
            self._newest.clear()
            self._newest_named.clear()
        else:
            self.dynamic_entries.appendleft((name, value))
            self._newest[(name, value)] = self._newest_named[name] = self._added
            self._added += 1
            self._current_size += size
            self._shrink()

    def _shrink(self) -> None:
        """hpack 4.2's HeaderTable._shrink, forgetting an evicted entry that was the newest with its key."""
        cursize = self._current_size
        entries, newest, named = self.dynamic_entries, self._newest, self._newest_named
        while cursize > self._maxsize:
            gone = self._added - len(entries)  # the number of the entry at the back
            name, value = entries.pop()
            cursize -= hpack.table.table_entry_size(name, value)
            if newest.get((name, value)) == gone:
                del newest[(name, value)]
            if named.get(name) == gone:
                del named[name]
        self._current_size = cursize

    def search(self, name: bytes, value: bytes) -> tuple[int, bytes, bytes | None] | None:
        """What hpack 4.2's HeaderTable.search answers: a perfect match (static, else the newest dynamic
        one), else a match on the name (static, else the newest dynamic one), else None."""
        static = hpack.table.HeaderTable.STATIC_TABLE_MAPPING.get(name)
        if static:
            index = static[1].get(value)
            if index is not None:
                return index, name, value
        entries = self.dynamic_entries
        offset = hpack.table.HeaderTable.STATIC_TABLE_LENGTH + 1
        n = self._newest.get((name, value))
        if n is not None:
            at = self._added - 1 - n
            if 0 <= at < len(entries) and entries[at] == (name, value):
                return at + offset, name, value
            return super().search(name, value)  # left behind by a clear: hpack's own walk
        if static:
            return static[0], name, None
        n = self._newest_named.get(name)
        if n is not None:
            at = self._added - 1 - n
            if 0 <= at < len(entries) and entries[at][0] == name:
                return at + offset, name, None
            return super().search(name, value)
        return None


def _encoder_init(self: hpack.hpack.Encoder, _init: Callable[..., None] = _ORIGINAL["encoder_init"]) -> None:
    """hpack's Encoder.__init__, with the indexed table."""
    _init(self)
    self.header_table = IndexedHeaderTable()


def install() -> None:
    """Take the repeated work out (idempotent; before the proxy serves)."""
    context.Context.fork = _fork  # type: ignore[method-assign]
    optmanager._Option.current = _current  # type: ignore[method-assign]
    url.parse_authority = _parse_authority
    vars(h2.connection)["repr"] = _LazyRepr  # the module's only repr: _receive_frame's trace
    vars(h2.stream)["validate_headers"] = validate_headers
    vars(hpack.hpack)["decode_huffman"] = _decode_huffman
    hpack.huffman.HuffmanEncoder.encode = _huffman_encode  # type: ignore[method-assign,assignment]
    hpack.hpack.Encoder.__init__ = _encoder_init  # type: ignore[method-assign]


def uninstall() -> None:
    """The libraries as they ship (for tests that compare the two)."""
    context.Context.fork = _ORIGINAL["fork"]  # type: ignore[method-assign]
    optmanager._Option.current = _ORIGINAL["current"]  # type: ignore[method-assign]
    url.parse_authority = _ORIGINAL["parse_authority"]
    vars(h2.connection).pop("repr", None)
    vars(h2.stream)["validate_headers"] = _ORIGINAL["validate_headers"]
    vars(hpack.hpack)["decode_huffman"] = _ORIGINAL["decode_huffman"]
    hpack.huffman.HuffmanEncoder.encode = _ORIGINAL["huffman_encode"]  # type: ignore[method-assign]
    hpack.hpack.Encoder.__init__ = _ORIGINAL["encoder_init"]  # type: ignore[method-assign]
    _huffman_memo.clear()
    _huffman_encoded.clear()
