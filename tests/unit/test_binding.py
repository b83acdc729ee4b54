"""Binding target node from JSON and from Kubernetes protobuf bodies."""

from __future__ import annotations

import pytest

from proxy.binding import PROTOBUF_MAGIC, target_node


def _len_field(number: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([(number << 3) | 2, len(payload)]) + payload


def protobuf_binding(pod: str, node: str) -> bytes:
    """What client-go sends with content type application/vnd.kubernetes.protobuf."""
    meta = _len_field(1, pod.encode())  # ObjectMeta.name
    target = _len_field(1, b"Node") + _len_field(3, node.encode())  # ObjectReference kind, name
    binding = _len_field(1, meta) + _len_field(2, target)
    type_meta = _len_field(1, b"v1") + _len_field(2, b"Binding")
    unknown = _len_field(1, type_meta) + _len_field(2, binding) + _len_field(4, b"application/vnd.kubernetes.protobuf")
    return PROTOBUF_MAGIC + unknown


@pytest.mark.parametrize(
    ("body", "content_type", "expected"),
    [
        (b'{"kind":"Binding","target":{"kind":"Node","name":"n1"}}', "application/json", "n1"),
        (b'{"target":{}}', "application/json", None),
        (b'{"target":"n1"}', "application/json", None),
        (b"[1,2]", "application/json", None),
        (b"not json", "application/json", None),
        (protobuf_binding("p1", "node-42"), "application/vnd.kubernetes.protobuf", "node-42"),
        (PROTOBUF_MAGIC + b"\x12\xff", "application/vnd.kubernetes.protobuf", None),
        (b"\x0a\x02hi", "application/vnd.kubernetes.protobuf", None),
    ],
    ids=["json", "json-no-name", "json-wrong-type", "json-array", "garbage", "protobuf",
         "protobuf-truncated", "protobuf-no-magic"],
)
def test_target_node(body: bytes, content_type: str, expected: str | None) -> None:
    assert target_node(body, content_type) == expected
