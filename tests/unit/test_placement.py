"""Kubernetes' placement rules on plain dicts: quantities, requests, node selector terms, tolerations, selectors."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from kube_fault_proxy.rig.invariants.placement import (
    allocatable,
    amount,
    bind_floor,
    excluded_by,
    pod_requests,
    quantity,
    selects,
    term_matches,
    term_selects,
    tolerates,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1), ("0", 0), ("100m", Fraction(1, 10)), ("1.5", Fraction(3, 2)), (".5", Fraction(1, 2)),
        ("5.", 5), ("+2", 2), ("-1", -1), ("1k", 1000), ("1M", 10**6), ("1G", 10**9), ("1T", 10**12),
        ("1P", 10**15), ("1E", 10**18), ("1Ki", 1024), ("1Mi", 2**20), ("1.5Gi", 3 * 2**29), ("1Ti", 2**40),
        ("1Pi", 2**50), ("2Ei", 2**61), ("1e3", 1000), ("1E3", 1000), ("1.5e-3", Fraction(3, 2000)),
        ("2e0", 2), ("5n", Fraction(5, 10**9)), ("5u", Fraction(5, 10**6)), ("16500m", Fraction(33, 2)),
        (" 4 ", 4), (110, 110),
    ],
)
def test_quantities(text: str, value: Fraction) -> None:
    assert quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1KB", "1.2.3", "Mi", "1 Mi", "1e", "1ki", "--1", "1e3Mi"])
def test_what_is_not_a_quantity(text: str) -> None:
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        quantity(text)


@pytest.mark.parametrize(
    ("resource", "text", "expected"),
    [("cpu", "1", 1000), ("cpu", "100m", 100), ("cpu", "0.0001", 1), ("memory", "1.5", 2), ("memory", "1Gi", 2**30),
     ("pods", "110", 110)],
)
def test_amounts_are_the_schedulers_units_rounded_up(resource: str, text: str, expected: int) -> None:
    assert amount(resource, quantity(text)) == expected


def container(cpu: str | None = None, memory: str | None = None, sidecar: bool = False) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    return {"name": "c", "resources": {"requests": requests}, **({"restartPolicy": "Always"} if sidecar else {})}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"containers": [container("1", "1Gi"), container("500m")]}, {"cpu": 1500, "memory": 2**30}),
        ({"containers": [container()]}, {}),
        ({"containers": [{"name": "c"}]}, {}),
        # the largest init container wins over the containers' sum where it is larger
        ({"containers": [container("1")], "initContainers": [container("2"), container("500m")]}, {"cpu": 2000}),
        # a sidecar runs beside the containers and beside every later init container
        ({"containers": [container("1")], "initContainers": [container("500m", sidecar=True), container("2")]},
         {"cpu": 2500}),
        ({"containers": [container("1")], "overhead": {"cpu": "250m"}}, {"cpu": 1250}),
        ({"containers": [container("1", "1Gi")], "resources": {"requests": {"cpu": "3"}}}, {"cpu": 3000, "memory": 2**30}),
        ({"containers": [{"name": "c", "resources": {"requests": {"ephemeral-storage": "1Gi"}}}]},
         {"ephemeral-storage": 2**30}),
    ],
    ids=["containers", "no-requests", "no-resources", "init-peak", "sidecar", "overhead", "pod-level", "ephemeral"],
)
def test_pod_requests(spec: dict[str, Any], expected: dict[str, int]) -> None:
    assert pod_requests({"spec": spec}) == expected


def test_allocatable() -> None:
    node = {"status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"}}}
    assert allocatable(node) == {"cpu": 16000, "memory": 64 * 2**30, "pods": 110}


NODE = {"metadata": {"name": "n1", "labels": {"zone": "a", "gen": "5", "ssd": ""}}}


@pytest.mark.parametrize(
    ("term", "matches"),
    [
        ({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}, True),
        ({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}, True),
        ({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}, False),
        ({"matchExpressions": [{"key": "rack", "operator": "NotIn", "values": ["a"]}]}, True),  # absent: not in
        ({"matchExpressions": [{"key": "ssd", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "rack", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "rack", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, False),
        ({"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}]}, True),
        ({"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["5"]}]}, False),
        ({"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["6"]}]}, True),
        ({"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["5"]}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "Gt", "values": ["1"]}]}, False),  # not an integer
        ({"matchExpressions": [{"key": "rack", "operator": "Lt", "values": ["9"]}]}, False),  # absent
        ({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]},
                               {"key": "gen", "operator": "In", "values": ["4"]}]}, False),  # every expression
        ({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}, True),
        ({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}, False),
        ({"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["n1"]}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
          "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}, False),
        ({}, False),  # an empty term matches no node
    ],
)
def test_node_selector_terms(term: dict[str, Any], matches: bool) -> None:
    assert term_matches(term, NODE) is matches


def affine(*terms: dict[str, Any], selector: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeSelector": selector} if selector else {}
    if terms:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                                             {"nodeSelectorTerms": list(terms)}}}
    return {"spec": spec}


@pytest.mark.parametrize(
    ("pod", "kind"),
    [
        (affine(), None),
        (affine(selector={"zone": "a"}), None),
        (affine(selector={"zone": "b"}), "nodeSelector"),
        (affine(selector={"disk": "ssd"}), "nodeSelector"),
        # nodeSelectorTerms are ORed
        (affine({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}), None),
        (affine({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}), "nodeAffinity"),
        (affine({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}, selector={"zone": "b"}),
         "nodeSelector"),  # both must allow the node
    ],
)
def test_what_excludes_a_node(pod: dict[str, Any], kind: str | None) -> None:
    why = excluded_by(pod, NODE)
    assert (why[0] if why else None) == kind


def test_a_selector_says_what_the_node_has() -> None:
    why = excluded_by(affine(selector={"disk": "ssd", "zone": "b"}), NODE)
    assert why == ("nodeSelector", "its nodeSelector wants disk=ssd (the node has no disk), zone=b (the node has zone=a)")


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        ({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"},
         {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
        ({"key": "k", "value": "v", "effect": "NoSchedule"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
        ({"key": "k", "operator": "Equal", "value": "w", "effect": "NoSchedule"},
         {"key": "k", "value": "v", "effect": "NoSchedule"}, False),
        ({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, {"key": "k", "value": "v", "effect": "NoSchedule"},
         True),
        ({"key": "j", "operator": "Exists"}, {"key": "k", "effect": "NoSchedule"}, False),
        ({"key": "k", "operator": "Exists", "effect": "NoExecute"}, {"key": "k", "effect": "NoSchedule"}, False),
        ({"key": "k", "operator": "Exists"}, {"key": "k", "effect": "NoExecute"}, True),  # empty effect: every effect
        ({"operator": "Exists"}, {"key": "anything", "value": "x", "effect": "NoExecute"}, True),  # tolerates all
        ({"operator": "Exists", "effect": "NoSchedule"}, {"key": "anything", "effect": "NoExecute"}, False),
        ({"key": "k", "operator": "Equal", "effect": "NoSchedule"}, {"key": "k", "effect": "NoSchedule"}, True),
        ({"key": "k", "operator": "Equal", "value": "v", "tolerationSeconds": 30, "effect": "NoExecute"},
         {"key": "k", "value": "v", "effect": "NoExecute"}, True),
        ({"key": "k", "operator": "Like", "value": "v"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, False),
    ],
)
def test_tolerations(toleration: dict[str, Any], taint: dict[str, Any], tolerated: bool) -> None:
    assert tolerates(toleration, taint) is tolerated


@pytest.mark.parametrize(
    ("selector", "selected"),
    [
        (None, False), ({}, True), ({"matchLabels": {"app": "db"}}, True), ({"matchLabels": {"app": "web"}}, False),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["db", "cache"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, True),
        ({"matchLabels": {"app": "db"}, "matchExpressions": [{"key": "tier", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]}, False),  # not a label operator
    ],
)
def test_label_selectors(selector: dict[str, Any] | None, selected: bool) -> None:
    assert selects(selector, {"app": "db"}) is selected


def pod(namespace: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": namespace, "labels": labels}, "spec": {}}


@pytest.mark.parametrize(
    ("term", "other", "selected"),
    [
        ({"labelSelector": {"matchLabels": {"app": "db"}}}, pod("a", app="db"), True),
        ({"labelSelector": {"matchLabels": {"app": "db"}}}, pod("b", app="db"), False),  # the pod's own namespace
        ({"labelSelector": {"matchLabels": {"app": "db"}}, "namespaces": ["b"]}, pod("b", app="db"), True),
        ({"labelSelector": {"matchLabels": {"app": "db"}}, "namespaceSelector": {}}, pod("z", app="db"), True),
        ({"labelSelector": {"matchLabels": {"app": "db"}}, "namespaceSelector": {"matchLabels": {"x": "y"}}},
         pod("a", app="db"), False),  # no namespace labels in a snapshot: such a selector adds nothing
        ({"labelSelector": None}, pod("a", app="db"), False),
        ({"labelSelector": {}, "matchLabelKeys": ["team"]}, pod("a", team="red"), True),
        ({"labelSelector": {}, "matchLabelKeys": ["team"]}, pod("a", team="blue"), False),
        ({"labelSelector": {}, "mismatchLabelKeys": ["team"]}, pod("a", team="red"), False),
    ],
)
def test_affinity_terms_select_pods(term: dict[str, Any], other: dict[str, Any], selected: bool) -> None:
    assert term_selects(pod("a", team="red"), term, other) is selected


@pytest.mark.parametrize(
    ("created", "conditions", "floor"),
    [
        ("2026-01-01T00:00:00Z", [], 1767225600.0),
        ("2026-01-01T00:00:00Z", [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:07Z"}],
         1767225607.0),
        ("2026-01-01T00:00:00Z", [{"type": "PodScheduled", "status": "False", "lastTransitionTime": "2026-01-01T00:00:07Z"}],
         1767225600.0),
        (None, [], None),
    ],
)
def test_the_earliest_a_binding_can_have_been(created: str | None, conditions: list[dict[str, str]],
                                             floor: float | None) -> None:
    p: dict[str, Any] = {"metadata": {"creationTimestamp": created} if created else {}, "status": {"conditions": conditions}}
    assert bind_floor(p) == floor
