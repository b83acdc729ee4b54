"""Binding target node from JSON and from Kubernetes protobuf bodies."""

from __future__ import annotations

import pytest
from kube_fault_proxy.proxy.requests.binding import PROTOBUF_MAGIC, read_target, target_node


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


DEEP = b'{"target": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


@pytest.mark.parametrize(
    ("body", "content_type", "expected"),
    [
        (b'{"target":{"kind":"Node","name":"n1"}}', "application/json", ("n1", None)),
        (b'{"target":{}}', "application/json", (None, None)),
        (b"not json", "application/json", (None, "not JSON")),
        (DEEP, "application/json", (None, "JSON nested too deep")),
        (b"\xff\xfe\x00", "application/json", (None, "not UTF-8")),
        (PROTOBUF_MAGIC + b"\x12\xff", "application/vnd.kubernetes.protobuf", (None, "bad protobuf (truncated varint)")),
        (PROTOBUF_MAGIC + b"\x0f", "application/vnd.kubernetes.protobuf", (None, "bad protobuf (unsupported wire type 7)")),
        (b"\x0a\x02hi", "application/vnd.kubernetes.protobuf", (None, "protobuf body without the k8s envelope")),
    ],
    ids=["json", "no-target", "garbage", "nested-100k-deep", "not-utf8", "protobuf-truncated",
         "protobuf-wire-type", "protobuf-no-magic"],
)
def test_read_target_says_why_a_body_is_unreadable(
    body: bytes, content_type: str, expected: tuple[str | None, str | None]
) -> None:
    assert read_target(body, content_type) == expected
    assert target_node(body, content_type) == expected[0]
