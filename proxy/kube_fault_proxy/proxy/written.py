"""The object a committed write's answer holds, as far as the journal needs it: name, namespace, uid,
resourceVersion and its controller (ownerReference with controller=true). A create's request has no name
(generateName), so a record of a write the client never saw answered (commitThenFail, failThenCommit) names
its object from the apiserver's answer. JSON or Kubernetes protobuf; None for anything else (a Status, an
encoded or unreadable body): never raises. `requested` reads a create's request body the same way (a write cut in
flight has no answer): its name or generateName, namespace and controller.

Protobuf field numbers are ObjectMeta's and OwnerReference's in k8s.io/apimachinery's generated.proto."""

from __future__ import annotations

import json

from kube_fault_proxy.proxy.protobuf import PROTOBUF_MAGIC, Buf, field, fields

Written = dict[str, object]
META = {1: "name", 3: "namespace", 5: "uid", 6: "resourceVersion"}  # ObjectMeta
REQUESTED = {1: "name", 2: "generateName", 3: "namespace"}  # ObjectMeta, as a create's request sends it
OWNER_REFERENCES = 13  # ObjectMeta.ownerReferences
OWNER = {1: "kind", 3: "name", 4: "uid"}  # OwnerReference (5: apiVersion)
OWNER_CONTROLLER = 6  # OwnerReference.controller, a bool (varint)
MAX_BODY = 1 << 20  # a larger answer is not read (a create's answer is one object)


def _strings(buf: Buf, names: dict[int, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for number, wire, value in fields(buf):
        if wire == 2 and number in names and names[number] not in out and not isinstance(value, int):
            out[names[number]] = bytes(value).decode("utf-8", "replace")
    return out


def _from_proto(body: Buf, names: dict[int, str] = META) -> Written | None:
    if bytes(body[:len(PROTOBUF_MAGIC)]) != PROTOBUF_MAGIC:
        return None
    unknown = memoryview(body)[len(PROTOBUF_MAGIC):]
    type_meta, raw = field(unknown, 1), field(unknown, 2)
    kind = bytes(field(type_meta, 2) or b"") if type_meta is not None else b""
    meta = field(raw, 1) if raw is not None and kind != b"Status" else None
    if meta is None:
        return None
    out: Written = {**_strings(meta, names)}
    for number, wire, value in fields(meta):
        if number == OWNER_REFERENCES and wire == 2 and not isinstance(value, int):
            ref = _strings(value, OWNER)
            if any(n == OWNER_CONTROLLER and v == 1 for n, w, v in fields(value) if w == 0):
                out["owner"] = ref
                break
    return out if out.get("name") or out.get("generateName") else None


def _from_json(body: bytes, names: dict[int, str] = META) -> Written | None:
    doc = json.loads(body)
    meta = doc.get("metadata") if isinstance(doc, dict) and doc.get("kind") != "Status" else None
    out: Written = {k: str(meta[k]) for k in names.values() if meta.get(k)} if isinstance(meta, dict) else {}
    if not isinstance(meta, dict) or not (out.get("name") or out.get("generateName")):
        return None
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            out["owner"] = {k: str(ref[k]) for k in ("kind", "name", "uid") if ref.get(k)}
            break
    return out


def written(content_type: str, body: bytes | None) -> Written | None:
    """The written object's identity from a 2xx answer's (decoded) body, or None."""
    return _read(content_type, body, META)


def requested(content_type: str, body: bytes | None) -> Written | None:
    """The object a create asks for, from its request's (decoded) body: name or generateName, namespace and
    controller (`owner`), as far as the body says; None when it names neither name nor generateName."""
    return _read(content_type, body, REQUESTED)


def _read(content_type: str, body: bytes | None, names: dict[int, str]) -> Written | None:
    if not body or len(body) > MAX_BODY:
        return None
    media = content_type.split(";")[0].strip()
    try:
        if media == "application/json":
            return _from_json(body, names)
        if media == "application/vnd.kubernetes.protobuf":
            return _from_proto(body, names)
    except (ValueError, TypeError, AttributeError, UnicodeDecodeError):
        return None
    return None
