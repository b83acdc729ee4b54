"""Inbound header checks in one pass (hyper-h2's validate_headers pipeline as one generator).

What it replaces: the name `validate_headers` in `h2.stream` (hyper-h2's `h2.utilities.validate_headers`,
and the seven chained generators it runs, reproduced). Why: hyper-h2 validates a received header block
through seven chained generators, and tests every byte of names and values in a Python loop. Here one
generator makes the same checks in the same order (per header: characters, empty name, `te`, connection
headers, pseudo-headers, Host/:authority, empty :path; after the last header: the pseudo-header set, then
Host/:authority), with the byte tests as regular expressions that find the same first offending byte.
`tests/unit/test_lean_wire.py` checks it against hyper-h2's own on generated header blocks, valid and
not.

What it bought: part of issue 23's second round (callgrind, Binding POSTs one at a time: 5.62 -> 4.75 M
instructions per request for the round's changes together; see the performance record).
"""

from __future__ import annotations

import re
from collections.abc import Generator, Iterable
from typing import Any

import h2.stream
import h2.utilities
from h2.exceptions import ProtocolError

PINNED = {
    "h2.utilities.validate_headers": "f2e9c263b028d430",
    "h2.utilities._reject_illegal_characters": "9096f50e9bbf573f",
    "h2.utilities._reject_empty_header_names": "574a0cc4cb6b090b",
    "h2.utilities._reject_te": "7fc32709bdc2d277",
    "h2.utilities._reject_connection_header": "0475c08f7c27938b",
    "h2.utilities._reject_pseudo_header_fields": "eabafefeedc7350c",
    "h2.utilities._check_host_authority_header": "461dcbf2b50ea821",
    "h2.utilities._validate_host_authority_header": "9f4fdbef00cc97c7",
    "h2.utilities._check_path_header": "07708f2731d99027",
    "h2.stream.H2Stream._process_received_headers": "991976183ebe21df",
}
ORIGINALS: dict[str, Any] = {
    "h2.utilities.validate_headers": h2.utilities.validate_headers,
    "h2.utilities._reject_illegal_characters": h2.utilities._reject_illegal_characters,
    "h2.utilities._reject_empty_header_names": h2.utilities._reject_empty_header_names,
    "h2.utilities._reject_te": h2.utilities._reject_te,
    "h2.utilities._reject_connection_header": h2.utilities._reject_connection_header,
    "h2.utilities._reject_pseudo_header_fields": h2.utilities._reject_pseudo_header_fields,
    "h2.utilities._check_host_authority_header": h2.utilities._check_host_authority_header,
    "h2.utilities._validate_host_authority_header": h2.utilities._validate_host_authority_header,
    "h2.utilities._check_path_header": h2.utilities._check_path_header,
    "h2.stream.H2Stream._process_received_headers": h2.stream.H2Stream._process_received_headers,
}

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


def apply(target: Any) -> None:
    """Validate received headers in one pass (idempotent)."""
    vars(h2.stream)["validate_headers"] = validate_headers


def revert() -> None:
    """hyper-h2's own pipeline back."""
    vars(h2.stream)["validate_headers"] = ORIGINALS["h2.utilities.validate_headers"]
