"""Binding target node from JSON and from Kubernetes protobuf bodies."""

from __future__ import annotations

import pytest
from kube_fault_proxy.proxy.engine import Engine
from kube_fault_proxy.proxy.requests.binding import PROTOBUF_MAGIC, read_target, target_node
from kube_fault_proxy.proxy.requests.identity import parse_untrusted

from tests.support.builders import profile


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


BINDING = '{"kind":"Binding","apiVersion":"v1","metadata":{"name":"p1"},"target":{"kind":"Node","name":"node-1"}'
DEEP_X = '"x":' + "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    "body",
    [
        f"{BINDING},{DEEP_X}}}",
        f'{{{DEEP_X},{BINDING[1:]}}}',
        f'{BINDING[:-1]},{DEEP_X}}}}}',
        f'{BINDING.replace("{\"name\":\"p1\"}", "{\"name\":\"p1\"," + DEEP_X + "}")}}}',
        f'{BINDING},"x":' + '{"y":' * 100_000 + "0" + "}" * 100_000 + "}",
    ],
    ids=["after", "before", "inside-target", "inside-metadata", "deep-objects"],
)
def test_depth_elsewhere_does_not_hide_the_target(body: str) -> None:
    assert read_target(body.encode(), "application/json") == ("node-1", None)


def test_protobuf_groups_beside_the_target_are_skipped() -> None:
    group = bytes([(9 << 3) | 3, (1 << 3) | 0, 7, (2 << 3) | 2, 1, 0x41, (9 << 3) | 4])  # field 9: a group
    body = protobuf_binding("p1", "node-42")
    unknown = body[len(PROTOBUF_MAGIC):]
    assert read_target(PROTOBUF_MAGIC + group + unknown) == ("node-42", None)
    assert read_target(PROTOBUF_MAGIC + bytes([(9 << 3) | 4]) + unknown) == (None, "bad protobuf (end of a group never begun)")


def test_the_deep_sibling_binding_matches_its_target_nodes_rule() -> None:
    engine = Engine(profile({"name": "abort-node-1", "match": {"targetNodes": ["node-1"]},
                             "fault": {"abort": {"status": 500}}}), epoch=1, seed=1, started_at=0.0)
    path = "/api/v1/namespaces/default/pods/p1/binding"
    plain, deep = f"{BINDING}}}".encode(), f"{BINDING},{DEEP_X}}}".encode()
    for body in (plain, deep):
        ident = parse_untrusted("POST", path, body=body, content_type="application/json")
        assert (ident.target_node, ident.unparsable) == ("node-1", None)
        decision = engine.decide(ident, 0.0)
        assert decision is not None and decision.plan.describe() == "respond 500"
    other = parse_untrusted("POST", path, body=deep.replace(b'"node-1"', b'"node-2"'), content_type="application/json")
    assert engine.decide(other, 0.0) is None


def test_a_binding_post_is_told_from_the_request_line_with_or_without_a_query() -> None:
    from kube_fault_proxy.proxy.requests.binding import is_binding_post

    path = "/api/v1/namespaces/default/pods/p/binding"
    assert is_binding_post("POST", path) and is_binding_post("POST", path + "?timeout=10s")
    assert not is_binding_post("GET", path) and not is_binding_post("POST", "/api/v1/namespaces/default/bindings")
