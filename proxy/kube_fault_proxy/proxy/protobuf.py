"""Kubernetes protobuf, read as far as a caller needs: the `k8s\\0` envelope and one field of a message at a time.
Shared by the Binding reader (its target node) and the revision log (an answer's or a watch event's
resourceVersion). Given a memoryview, a field is a view too: nothing is copied, however large the message."""

from __future__ import annotations

from collections.abc import Iterator

PROTOBUF_MAGIC = b"k8s\x00"  # the apiserver's envelope: this magic, then a runtime.Unknown{typeMeta: 1, raw: 2}
Buf = bytes | memoryview


def _varint(buf: Buf, pos: int) -> tuple[int, int]:
    """Decode one protobuf varint at pos; returns (value, next position)."""
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def field(buf: Buf, number: int, cut: bool = False) -> Buf | None:
    """The first length-delimited field `number` of a protobuf message, or None; unknown fields,
    groups (wire types 3 and 4, which Go's generated decoders skip) included, are skipped. `cut`: `buf` is only
    a message's first bytes, and the field, if it runs past them, is returned as far as it goes (a field cut off
    before it is still an error)."""
    pos = groups = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        wire = key & 7
        if wire == 0:
            _, pos = _varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            length, pos = _varint(buf, pos)
            wanted = key >> 3 == number and not groups
            if pos + length > len(buf) and not (cut and wanted):
                raise ValueError("truncated field")
            if wanted:
                return buf[pos : pos + length]
            pos += length
        elif wire == 3:
            groups += 1
        elif wire == 4 and groups:
            groups -= 1
        else:
            raise ValueError(f"unsupported wire type {wire}" if wire != 4 else "end of a group never begun")
    return None


def fields(buf: Buf) -> Iterator[tuple[int, int, Buf | int]]:
    """Each top-level field of a message: (number, wire type, bytes or integer); fixed-width ones are skipped.
    ValueError on a message cut short or an unknown wire type."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, wire, value
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > len(buf):
                raise ValueError("truncated field")
            yield number, wire, buf[pos:pos + length]
            pos += length
        else:
            raise ValueError(f"unsupported wire type {wire}")
