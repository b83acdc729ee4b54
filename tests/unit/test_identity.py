"""Request identity, table-driven from the path shapes of kube-apiserver's requestinfo.go."""

from __future__ import annotations

import json

import pytest
from kube_fault_proxy.proxy.requests import identity
from kube_fault_proxy.proxy.requests.identity import parse, parse_untrusted

# method, path?query, verb, group, version, namespace, resource, subresource, name
RESOURCE_CASES = [
    ("GET", "/api/v1/namespaces", "list", "", "v1", "", "namespaces", "", ""),
    ("GET", "/api/v1/namespaces/other", "get", "", "v1", "other", "namespaces", "", "other"),
    ("GET", "/api/v1/namespaces/other/pods", "list", "", "v1", "other", "pods", "", ""),
    ("GET", "/api/v1/namespaces/other/pods/foo", "get", "", "v1", "other", "pods", "", "foo"),
    ("HEAD", "/api/v1/namespaces/other/pods/foo", "get", "", "v1", "other", "pods", "", "foo"),
    ("GET", "/api/v1/pods", "list", "", "v1", "", "pods", "", ""),
    ("HEAD", "/api/v1/pods", "list", "", "v1", "", "pods", "", ""),
    ("GET", "/api/v1/nodes/n1", "get", "", "v1", "", "nodes", "", "n1"),
    # special verbs
    ("GET", "/api/v1/proxy/namespaces/other/pods/foo", "proxy", "", "v1", "other", "pods", "", "foo"),
    ("GET", "/api/v1/proxy/namespaces/other/pods/foo/subpath/not/a/subresource", "proxy", "", "v1",
     "other", "pods", "", "foo"),
    ("GET", "/api/v1/watch/pods", "watch", "", "v1", "", "pods", "", ""),
    ("GET", "/api/v1/pods?watch=true", "watch", "", "v1", "", "pods", "", ""),
    ("GET", "/api/v1/pods?watch=false", "list", "", "v1", "", "pods", "", ""),
    ("GET", "/api/v1/watch/namespaces/other/pods", "watch", "", "v1", "other", "pods", "", ""),
    ("GET", "/api/v1/namespaces/other/pods?watch=1", "watch", "", "v1", "other", "pods", "", ""),
    ("GET", "/api/v1/namespaces/other/pods?watch=0", "list", "", "v1", "other", "pods", "", ""),
    ("GET", "/api/v1/pods?resourceVersion=10&watch=1&allowWatchBookmarks=true", "watch", "", "v1",
     "", "pods", "", ""),
    # subresources
    ("GET", "/api/v1/namespaces/other/pods/foo/status", "get", "", "v1", "other", "pods", "status",
     "foo"),
    ("GET", "/api/v1/namespaces/other/pods/foo/proxy/subpath", "get", "", "v1", "other", "pods",
     "proxy", "foo"),
    ("PUT", "/api/v1/namespaces/other/finalize", "update", "", "v1", "other", "namespaces",
     "finalize", "other"),
    ("PUT", "/api/v1/namespaces/other/status", "update", "", "v1", "other", "namespaces", "status",
     "other"),
    ("POST", "/api/v1/namespaces/default/pods/p1/binding", "create", "", "v1", "default", "pods",
     "binding", "p1"),
    ("POST", "/api/v1/namespaces/default/pods/p1/eviction", "create", "", "v1", "default", "pods",
     "eviction", "p1"),
    # verbs
    ("PATCH", "/api/v1/namespaces/other/pods/foo", "patch", "", "v1", "other", "pods", "", "foo"),
    ("DELETE", "/api/v1/namespaces/other/pods/foo", "delete", "", "v1", "other", "pods", "", "foo"),
    ("POST", "/api/v1/namespaces/other/pods", "create", "", "v1", "other", "pods", "", ""),
    ("DELETE", "/api/v1/nodes", "deletecollection", "", "v1", "", "nodes", "", ""),
    ("DELETE", "/api/v1/namespaces", "deletecollection", "", "v1", "", "namespaces", "", ""),
    ("DELETE", "/api/v1/namespaces/other/pods", "deletecollection", "", "v1", "other", "pods", "",
     ""),
    ("DELETE", "/apis/extensions/v1/namespaces/other/pods", "deletecollection", "extensions", "v1",
     "other", "pods", "", ""),
    # groups and versions
    ("POST", "/apis/extensions/v1/namespaces/other/pods", "create", "extensions", "v1", "other",
     "pods", "", ""),
    ("POST", "/apis/extensions/v1beta3/namespaces/other/pods", "create", "extensions", "v1beta3",
     "other", "pods", "", ""),
    ("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler", "get",
     "coordination.k8s.io", "v1", "kube-system", "leases", "", "kube-scheduler"),
    ("PUT", "/apis/apps/v1/namespaces/ns/deployments/d/scale", "update", "apps", "v1", "ns",
     "deployments", "scale", "d"),
    ("GET", "/apis/storage.k8s.io/v1/csinodes?limit=500", "list", "storage.k8s.io", "v1", "",
     "csinodes", "", ""),
    # a field selector on metadata.name names the object of a list or watch
    ("GET", "/api/v1/namespaces/other/pods?fieldSelector=metadata.name%3Dfoo", "list", "", "v1",
     "other", "pods", "", "foo"),
    ("GET", "/api/v1/namespaces/other/pods?watch=1&fieldSelector=metadata.name%3D%3Dfoo", "watch",
     "", "v1", "other", "pods", "", "foo"),
    ("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1", "list", "", "v1", "", "pods", "", ""),
    # unknown methods have no verb, as in requestinfo.go
    ("OPTIONS", "/api/v1/pods", "", "", "v1", "", "pods", "", ""),
]


@pytest.mark.parametrize(
    ("method", "url", "verb", "group", "version", "namespace", "resource", "subresource", "name"),
    RESOURCE_CASES,
    ids=[f"{c[0]} {c[1]}" for c in RESOURCE_CASES],
)
def test_resource_requests(
    method: str, url: str, verb: str, group: str, version: str, namespace: str, resource: str,
    subresource: str, name: str,
) -> None:
    path, _, query = url.partition("?")
    ident = parse(method, path, query)
    assert ident.is_resource
    got = (ident.verb, ident.group, ident.version, ident.namespace, ident.resource,
           ident.subresource, ident.name)
    assert got == (verb, group, version, namespace, resource, subresource, name)
    assert ident.watch == (verb == "watch")


NON_RESOURCE = ["/", "/healthz", "/readyz", "/livez", "/version", "/openapi/v2", "/api", "/api/v1",
                "/apis", "/apis/apps", "/apis/apps/v1", "/metrics", "/api/v1/watch"]


@pytest.mark.parametrize("path", NON_RESOURCE)
def test_non_resource_requests(path: str) -> None:
    ident = parse("GET", path)
    assert not ident.is_resource
    assert ident.verb == "get"
    assert ident.resource == ""
    assert ident.path == path


def test_non_resource_verb_is_the_method() -> None:
    assert parse("POST", "/openapi/v2").verb == "post"


def test_user_agent_and_resource_version_are_kept() -> None:
    ident = parse("GET", "/api/v1/pods", "watch=1&resourceVersion=42", user_agent="kube-scheduler/v1.36")
    assert ident.user_agent == "kube-scheduler/v1.36"
    assert ident.resource_version == "42"


def test_binding_target_node_from_json_body() -> None:
    body = json.dumps({"kind": "Binding", "apiVersion": "v1", "metadata": {"name": "p1"},
                       "target": {"kind": "Node", "name": "node-7"}}).encode()
    ident = parse("POST", "/api/v1/namespaces/default/pods/p1/binding", body=body,
                  content_type="application/json")
    assert ident.target_node == "node-7"
    assert ident.object_key == "pods/default/p1"


def test_target_node_only_for_binding_posts() -> None:
    body = b'{"target": {"name": "n"}}'
    assert parse("POST", "/api/v1/namespaces/default/pods", body=body).target_node is None


def test_percent_encoded_names_are_decoded() -> None:
    assert parse("GET", "/api/v1/namespaces/ns/configmaps/a%3Ab").name == "a:b"


def test_as_dict_names_the_object() -> None:
    d = parse("POST", "/api/v1/namespaces/default/pods/p1/binding").as_dict()
    assert d["resource"] == "pods" and d["subresource"] == "binding" and d["name"] == "p1"
    assert "resource" not in parse("GET", "/healthz").as_dict()


def test_an_unreadable_binding_body_is_no_target_node_and_says_why() -> None:
    deep = b'{"target": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    ident = parse("POST", "/api/v1/namespaces/default/pods/p1/binding", body=deep, content_type="application/json")
    assert ident.target_node is None and ident.verb == "create" and ident.name == "p1"
    assert ident.unparsable == "binding body: JSON nested too deep"
    assert ident.as_dict()["unparsable"] == "binding body: JSON nested too deep"
    assert parse("GET", "/api/v1/pods").unparsable is None


def test_parse_untrusted_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(body: bytes, content_type: str = "") -> tuple[str | None, str | None]:
        raise MemoryError("a parser rule nobody foresaw")

    monkeypatch.setattr(identity.binding, "read_target", broken)
    ident = parse_untrusted("POST", "/api/v1/namespaces/default/pods/p1/binding", "dryRun=All", body=b"{}")
    assert ident.unparsable == "request: MemoryError"
    assert (ident.verb, ident.resource, ident.subresource, ident.name) == ("create", "pods", "binding", "p1")
    monkeypatch.setattr(identity, "parse", lambda *a, **k: (_ for _ in ()).throw(ValueError("no")))
    ident = parse_untrusted("post", "/weird")
    assert (ident.method, ident.verb, ident.unparsable, ident.is_resource) == ("POST", "post", "request: ValueError", False)


@pytest.mark.parametrize("method,url", [(c[0], c[1]) for c in RESOURCE_CASES] + [("GET", p) for p in NON_RESOURCE])
def test_a_request_without_a_body_is_parsed_once_and_as_before(method: str, url: str) -> None:
    path, _, query = url.partition("?")
    first = parse(method, path, query, "yunikorn", None, "application/json", "application/json")
    assert first == identity._parse(method, path, query, "yunikorn", None, "", "application/json")
    assert parse(method, path, query, "yunikorn", None, "text/plain", "application/json") is first  # shared: immutable
    assert parse(method, path, query, "kube-scheduler", None, "", "application/json") != first  # keyed by who asks


def test_a_request_with_a_body_is_parsed_each_time() -> None:
    body = json.dumps({"kind": "Binding", "target": {"kind": "Node", "name": "n1"}}).encode()
    a = parse("POST", "/api/v1/namespaces/d/pods/p/binding", "", "", body, "application/json")
    b = parse("POST", "/api/v1/namespaces/d/pods/p/binding", "", "", body.replace(b"n1", b"n2"), "application/json")
    assert (a.target_node, b.target_node) == ("n1", "n2")
