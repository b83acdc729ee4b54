"""Request identity: what a request does to which Kubernetes object, after apiserver's requestinfo.go."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from urllib.parse import parse_qsl, unquote

from kube_fault_proxy.proxy.requests import binding

API_PREFIXES = frozenset({"api", "apis"})
GROUPLESS_PREFIXES = frozenset({"api"})
SPECIAL_VERBS = frozenset({"proxy", "watch"})
SPECIAL_VERBS_NO_SUBRESOURCES = frozenset({"proxy"})
NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
METHOD_VERBS = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}
WRITES = frozenset({"create", "update", "patch", "delete"})  # the verbs that change an object


@dataclass(frozen=True, slots=True)
class RequestIdentity:
    """One request as the apiserver's authorizer would see it."""

    method: str
    path: str
    verb: str
    is_resource: bool = False
    group: str = ""
    version: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    user_agent: str = ""
    target_node: str | None = None
    resource_version: str | None = None
    accept: str = ""
    initial_events: bool = False  # a watch with sendInitialEvents=true: a streaming (re)list
    continued: bool = False  # a LIST page after the first (?continue=TOKEN): its revision is the token's
    unparsable: str | None = None  # what part of the request could not be read, and why

    @property
    def relist(self) -> bool:
        """A LIST, or a watch that streams the initial state (client-go's WatchList)."""
        return self.verb == "list" or (self.verb == "watch" and self.initial_events)

    @property
    def watch(self) -> bool:
        """True for a watch, by query flag or by the legacy /watch/ path."""
        return self.verb == "watch"

    @property
    def binding(self) -> bool:
        """A Binding POST: what schedulers send to bind a pod."""
        return self.verb == "create" and self.subresource == "binding"

    @property
    def object_key(self) -> str:
        """The object this request is about: resource/namespace/name (pods/binding → the pod)."""
        return f"{self.resource}/{self.namespace}/{self.name}"

    def as_dict(self) -> dict[str, object]:
        """The identity as JSON-ready data for the journal."""
        out: dict[str, object] = {"verb": self.verb, "path": self.path}
        if self.is_resource:
            out.update(
                group=self.group,
                version=self.version,
                resource=self.resource,
                subresource=self.subresource,
                namespace=self.namespace,
                name=self.name,
            )
        if self.user_agent:
            out["userAgent"] = self.user_agent
        if self.target_node is not None:
            out["targetNode"] = self.target_node
        if self.resource_version is not None:
            out["resourceVersion"] = self.resource_version
        if self.initial_events:
            out["sendInitialEvents"] = True
        if self.unparsable is not None:
            out["unparsable"] = self.unparsable
        return out


def _watch_flag(values: list[str]) -> bool:
    """apiserver's bool conversion of ?watch=: anything but 0/false turns a list into a watch."""
    return values[0].lower() not in ("0", "false")


def _field_selector_name(selector: str) -> str:
    """The exact metadata.name a field selector pins, or ""."""
    for term in selector.split(","):
        for op in ("==", "="):
            key, sep, value = term.partition(op)
            if sep and key.strip() == "metadata.name" and "!" not in key:
                value = value.strip()
                if value and "/" not in value and value not in (".", ".."):
                    return value
                return ""
    return ""


def parse(
    method: str,
    path: str,
    query: str = "",
    user_agent: str = "",
    body: bytes | None = None,
    content_type: str = "",
    accept: str = "",
) -> RequestIdentity:
    """Parse one request; `path` excludes the query string, which is passed separately.

    A request without a body is parsed once per distinct (method, path, query, user agent, accept): the
    identity is immutable, so every such request (a scheduler's Event POSTs, its watches) shares it."""
    if body is None:
        return _parse_bodiless(method, path, query, user_agent, accept)
    return _parse(method, path, query, user_agent, body, content_type, accept)


def _parse(method: str, path: str, query: str, user_agent: str, body: bytes | None, content_type: str,
           accept: str) -> RequestIdentity:
    method = method.upper()
    parts = [unquote(p) for p in path.strip("/").split("/") if p] if path.strip("/") else []
    if len(parts) < 3 or parts[0] not in API_PREFIXES:
        return RequestIdentity(method=method, path=path, verb=method.lower(), user_agent=user_agent)
    prefix, rest = parts[0], parts[1:]
    group = ""
    if prefix not in GROUPLESS_PREFIXES:
        if len(rest) < 3:
            return RequestIdentity(method=method, path=path, verb=method.lower(), user_agent=user_agent)
        group, rest = rest[0], rest[1:]
    version, rest = rest[0], rest[1:]

    if rest[0] in SPECIAL_VERBS:
        if len(rest) < 2:
            return RequestIdentity(method=method, path=path, verb=method.lower(), user_agent=user_agent)
        verb, rest = rest[0], rest[1:]
    else:
        verb = METHOD_VERBS.get(method, "")

    namespace = ""
    if rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in NAMESPACE_SUBRESOURCES:
            rest = rest[2:]

    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) >= 2 else ""
    subresource = rest[2] if len(rest) >= 3 and verb not in SPECIAL_VERBS_NO_SUBRESOURCES else ""

    params: dict[str, list[str]] = {}
    if query:
        for key, value in parse_qsl(query, keep_blank_values=True):
            params.setdefault(key, []).append(value)
    if not name and verb == "get":
        verb = "watch" if "watch" in params and _watch_flag(params["watch"]) else "list"
        if "fieldSelector" in params:
            name = _field_selector_name(params["fieldSelector"][0])
    if not name and verb == "delete":
        verb = "deletecollection"

    target_node = unparsable = None
    if subresource == "binding" and resource == "pods" and verb == "create" and body:
        target_node, why = binding.read_target(body, content_type)
        unparsable = f"binding body: {why}" if why else None
    rv = params.get("resourceVersion", [None])[0]
    return RequestIdentity(
        method=method,
        path=path,
        verb=verb,
        is_resource=True,
        group=group,
        version=version,
        resource=resource,
        subresource=subresource,
        namespace=namespace,
        name=name,
        user_agent=user_agent,
        target_node=target_node,
        resource_version=rv,
        accept=accept,
        initial_events=params.get("sendInitialEvents", ["false"])[0] == "true",
        continued=bool(params.get("continue", [""])[0]),
        unparsable=unparsable,
    )


@functools.lru_cache(maxsize=4096)
def _parse_bodiless(method: str, path: str, query: str, user_agent: str, accept: str) -> RequestIdentity:
    """`_parse` of a request without a body, memoised (bounded; an error is raised again every time)."""
    return _parse(method, path, query, user_agent, None, "", accept)


def parse_untrusted(
    method: str,
    path: str,
    query: str = "",
    user_agent: str = "",
    body: bytes | None = None,
    content_type: str = "",
    accept: str = "",
) -> RequestIdentity:
    """`parse` that never raises: what cannot be read is named in `unparsable`, and the rest kept."""
    try:
        return parse(method, path, query, user_agent, body, content_type, accept)
    except Exception as e:  # a request no parser rule foresaw must still get a decision
        why = f"request: {type(e).__name__}"
    try:
        return replace(parse(method, path, "", user_agent), unparsable=why)
    except Exception:
        return RequestIdentity(method=method.upper(), path=path, verb=method.lower(), unparsable=why)
