"""The target node of a Binding POST body, in JSON or Kubernetes protobuf (k8s\\0 envelope); what else
the body holds, however deep, is skipped and cannot hide it."""

from __future__ import annotations

from kube_fault_proxy.proxy.protobuf import PROTOBUF_MAGIC
from kube_fault_proxy.proxy.protobuf import field as _field
from kube_fault_proxy.proxy.requests.json_fields import JSONFields, NotJSON

TARGET = ("target", "name")
FIELDS = JSONFields([TARGET])  # the pod is named by the URL, as the apiserver reads it: nothing else


def is_binding_post(method: str, path: str) -> bool:
    """Whether a request (its method and its path, with or without the query) creates a Binding: a POST to a
    pod's `binding` subresource. Decided from the request line alone, before the body is read; the path is split
    only for a POST, so any other request costs one comparison."""
    return method == "POST" and path.partition("?")[0].endswith("/binding")


def read_target(body: bytes, content_type: str = "") -> tuple[str | None, str | None]:
    """(Binding.target.name or None, why the body could not be read or None); never raises."""
    try:
        if body.startswith(PROTOBUF_MAGIC):
            raw = _field(body[len(PROTOBUF_MAGIC) :], 2)  # runtime.Unknown.raw
            target = _field(raw, 2) if raw is not None else None  # Binding.target
            name = _field(target, 3) if target is not None else None  # ObjectReference.name
            return (bytes(name).decode() if name is not None else None), None
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
