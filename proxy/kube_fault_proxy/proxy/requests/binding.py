"""The target node of a Binding POST body, in JSON or Kubernetes protobuf (k8s\\0 envelope); what else
the body holds, however deep, is skipped and cannot hide it."""

from __future__ import annotations

from kube_fault_proxy.proxy.requests.json_fields import JSONFields, NotJSON

PROTOBUF_MAGIC = b"k8s\x00"
TARGET = ("target", "name")
FIELDS = JSONFields([TARGET])  # the pod is named by the URL, as the apiserver reads it: nothing else


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
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


def _field(buf: bytes, number: int) -> bytes | None:
    """The first length-delimited field `number` of a protobuf message, or None; unknown fields,
    groups (wire types 3 and 4, which Go's generated decoders skip) included, are skipped."""
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
            if key >> 3 == number and not groups:
                return buf[pos : pos + length]
            pos += length
        elif wire == 3:
            groups += 1
        elif wire == 4 and groups:
            groups -= 1
        else:
            raise ValueError(f"unsupported wire type {wire}" if wire != 4 else "end of a group never begun")
    return None


def read_target(body: bytes, content_type: str = "") -> tuple[str | None, str | None]:
    """(Binding.target.name or None, why the body could not be read or None); never raises."""
    try:
        if body.startswith(PROTOBUF_MAGIC):
            raw = _field(body[len(PROTOBUF_MAGIC) :], 2)  # runtime.Unknown.raw
            target = _field(raw, 2) if raw is not None else None  # Binding.target
            name = _field(target, 3) if target is not None else None  # ObjectReference.name
            return (name.decode() if name is not None else None), None
        if "protobuf" in content_type:
            return None, "protobuf body without the k8s envelope"
        picked = FIELDS.pick(body.decode("utf-8").removeprefix("\ufeff"))
        node = picked.values.get(TARGET)
        if node is None and picked.too_deep:  # the target itself is nested too deep to be one
            return None, "JSON nested too deep"
        return node, None
    except UnicodeDecodeError:
        return None, "not UTF-8"
    except NotJSON:
        return None, "not JSON"
    except ValueError as e:  # a truncated or unknown protobuf field
        return None, f"bad protobuf ({e})"


def target_node(body: bytes, content_type: str = "") -> str | None:
    """Binding.target.name, or None when the body is not a readable Binding."""
    return read_target(body, content_type)[0]
