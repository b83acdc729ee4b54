"""metav1.Status bodies and headers shaped exactly like the kube-apiserver's own errors."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from kube_fault_proxy.proxy.requests.identity import RequestIdentity

JSON = "application/json"
# StatusReason per HTTP code, as k8s.io/apimachinery/pkg/api/errors assigns them.
REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}
APF_429_BODY = b"Too many requests, please try again later.\n"
TIMEOUT_MESSAGE = "Timeout: request did not complete within requested timeout - context deadline exceeded"


@dataclass(frozen=True, slots=True)
class Reply:
    """A complete synthetic HTTP response: status, headers and body."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = field(default=())


def default_reason(code: int) -> str:
    """The StatusReason the apiserver uses for an HTTP code ("" when it has none)."""
    return REASONS.get(code, "InternalError" if code >= 500 else "")


def default_message(code: int, reason: str, ident: RequestIdentity) -> str:
    """A message worded like the apiserver's for this reason and object."""
    what = ident.resource + (f"/{ident.subresource}" if ident.subresource else "")
    obj = f'{what} "{ident.name}"' if ident.name else what or ident.path
    match reason:
        case "NotFound":
            return f"{obj} not found"
        case "Conflict":
            return f"Operation cannot be fulfilled on {obj}: injected conflict"
        case "AlreadyExists":
            return f"{obj} already exists"
        case "Forbidden":
            return f"{obj} is forbidden: injected by kube-fault-proxy"
        case "ServiceUnavailable":
            return "the server is currently unable to handle the request"
        case "Timeout":
            return TIMEOUT_MESSAGE
        case "TooManyRequests":
            return "Too many requests, please try again later."
        case "Expired" | "Gone":
            return "too old resource version"
        case "InternalError":
            return "Internal error occurred: injected by kube-fault-proxy"
    return f"injected {code} {reason}".strip()


def status_body(
    code: int,
    reason: str,
    message: str,
    ident: RequestIdentity | None = None,
    retry_after_seconds: int | None = None,
) -> bytes:
    """A metav1.Status failure body; details name the object when the request names one."""
    details: dict[str, object] = {}
    if ident is not None and ident.name:
        details["name"] = ident.name
        if ident.group:
            details["group"] = ident.group
        details["kind"] = ident.resource
    if retry_after_seconds is not None:
        details["retryAfterSeconds"] = retry_after_seconds
    doc: dict[str, object] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details:
        doc["details"] = details
    doc["code"] = code
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


def status_reply(
    code: int,
    ident: RequestIdentity,
    reason: str | None = None,
    message: str | None = None,
    retry_after_seconds: int | None = None,
) -> Reply:
    """A JSON Status error reply; Retry-After only when retry_after_seconds is given."""
    reason = reason if reason is not None else default_reason(code)
    message = message if message is not None else default_message(code, reason, ident)
    headers: list[tuple[str, str]] = [("Content-Type", JSON), ("Cache-Control", "no-cache, private")]
    if retry_after_seconds is not None:
        headers.append(("Retry-After", str(retry_after_seconds)))
    body = status_body(code, reason, message, ident, retry_after_seconds)
    return Reply(code, body, tuple(headers))


def apf_throttle_reply(retry_after_seconds: int) -> Reply:
    """A 429 exactly as API Priority and Fairness writes it: plain text and Retry-After."""
    headers = (
        ("Retry-After", str(retry_after_seconds)),
        ("Content-Type", "text/plain; charset=utf-8"),
        ("X-Content-Type-Options", "nosniff"),
    )
    return Reply(429, APF_429_BODY, headers)


def watch_error_event(code: int, reason: str, message: str) -> bytes:
    """One watch ERROR event line carrying a Status, as the apiserver ends a watch."""
    status = json.loads(status_body(code, reason, message))
    return json.dumps({"type": "ERROR", "object": status}, separators=(",", ":")).encode() + b"\n"
