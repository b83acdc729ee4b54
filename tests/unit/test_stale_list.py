"""staleList (proxy.faults.stale_list): its schema and the requests it applies to. What it sends, and the addons
that send it, are tested in test_stale_reads.py."""

from __future__ import annotations

from typing import Any

import pytest
from kube_fault_proxy.proxy.faults.stale_list import StaleList
from kube_fault_proxy.proxy.requests.identity import parse

from tests.support.builders import profile


@pytest.mark.parametrize(("method", "path", "query", "applies"), [
    ("GET", "/api/v1/namespaces/ns/pods", "", True),
    ("GET", "/api/v1/pods", "limit=500&resourceVersion=0", True),
    ("GET", "/api/v1/pods", "limit=500&continue=abc", False),  # a later page: read at its token's revision
    ("GET", "/api/v1/namespaces/ns/pods/a", "", True),
    ("GET", "/api/v1/nodes/n1", "", True),
    ("GET", "/api/v1/namespaces/ns/pods/a/log", "", False),
    ("GET", "/api/v1/namespaces/ns/pods/a/status", "", False),
    ("GET", "/api/v1/pods", "watch=1", False),
    ("GET", "/api/v1/pods", "watch=1&sendInitialEvents=true", True),  # a WatchList: a relist
    ("POST", "/api/v1/namespaces/ns/pods", "", False),
    ("GET", "/healthz", "", False),
])
def test_it_applies_to_lists_and_gets_of_one_object(method: str, path: str, query: str, applies: bool) -> None:
    assert StaleList(lagWrites=1).applies_to(parse(method, path, query)) is applies


@pytest.mark.parametrize(("fault", "expected"), [
    ({}, "staleList needs exactly one of lagSeconds, lagWrites"),
    ({"lagSeconds": 5, "lagWrites": 2}, "staleList needs exactly one of lagSeconds, lagWrites"),
    ({"lagSeconds": 0}, "lagSeconds: Input should be greater than 0"),
    ({"lagSeconds": 601}, "lagSeconds: Input should be less than or equal to 600"),
    ({"lagWrites": 1001}, "lagWrites: Input should be less than or equal to 1000"),
    ({"lagWrites": 2, "lagCommits": 1}, "staleList.lagCommits: unknown field"),
])
def test_the_schema_is_strict(fault: dict[str, Any], expected: str) -> None:
    from kube_fault_proxy.proxy.profiles.problems import ProfileError

    with pytest.raises(ProfileError) as e:
        profile({"name": "r", "fault": {"staleList": fault}})
    assert expected in str(e.value)
