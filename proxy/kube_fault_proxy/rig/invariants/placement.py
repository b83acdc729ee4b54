"""What Kubernetes says about where a pod may go, on plain pod and node dicts: quantities, requests,
node selectors and required node affinity, taints and tolerations, label selectors and pod anti-affinity.

Each rule follows the scheduler's own code (kube-scheduler's NodeResourcesFit, NodeAffinity,
TaintToleration and InterPodAffinity plugins; k8s.io/component-helpers for requests and node
selector terms), so the checker judges a placement as the scheduler should have.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from fractions import Fraction
from typing import Any

Obj = dict[str, Any]
UNSCHEDULABLE_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}  # what a cordon means

# <signedNumber> then a binary suffix, a decimal exponent, or a decimal suffix (Kubernetes' quantity grammar).
_QUANTITY = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
                       r"(?:(Ki|Mi|Gi|Ti|Pi|Ei)|[eE]([+-]?[0-9]+)|(n|u|m|k|M|G|T|P|E)?)")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), None: Fraction(1),
            "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
            "P": Fraction(10**15), "E": Fraction(10**18)}
_INTEGER = re.compile(r"[+-]?[0-9]+")


def quantity(value: str | int | float) -> Fraction:
    """A Kubernetes quantity, exactly (`100m`, `1.5Gi`, `1e3`, `2E`); ValueError if it is not one."""
    m = _QUANTITY.fullmatch(str(value).strip())
    if m is None:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    number, binary, exponent, decimal = m.groups()
    if binary:
        factor = Fraction(_BINARY[binary])
    elif exponent is not None:
        factor = Fraction(10) ** int(exponent)
    else:
        factor = _DECIMAL[decimal]
    return Fraction(Decimal(number)) * factor


def amount(resource: str, value: Fraction) -> int:
    """A quantity as the scheduler compares it: cpu in millicores, everything else in units, rounded up."""
    return math.ceil(value * 1000) if resource == "cpu" else math.ceil(value)


def _add(total: dict[str, Fraction], more: Mapping[str, Any]) -> dict[str, Fraction]:
    out = dict(total)
    for name, value in more.items():
        out[name] = out.get(name, Fraction(0)) + quantity(value)
    return out


def pod_requests(pod: Obj) -> dict[str, int]:
    """What a pod requests, as the scheduler counts it: its containers (and sidecars) or its largest
    init container, whichever is more, plus its overhead; pod-level requests win where set."""
    spec = pod["spec"]

    def requests(c: Obj) -> Mapping[str, Any]:
        return (c.get("resources") or {}).get("requests") or {}

    total: dict[str, Fraction] = {}
    for c in spec.get("containers") or []:
        total = _add(total, requests(c))
    init_peak: dict[str, Fraction] = {}
    sidecars: dict[str, Fraction] = {}
    for c in spec.get("initContainers") or []:
        if c.get("restartPolicy") == "Always":  # a sidecar runs as long as the pod does
            total, sidecars = _add(total, requests(c)), _add(sidecars, requests(c))
            running = sidecars
        else:
            running = _add(sidecars, requests(c))
        init_peak = {k: max(init_peak.get(k, Fraction(0)), running.get(k, Fraction(0)))
                     for k in init_peak.keys() | running.keys()}
    total = {k: max(total.get(k, Fraction(0)), init_peak.get(k, Fraction(0))) for k in total.keys() | init_peak.keys()}
    pod_level = (spec.get("resources") or {}).get("requests") or {}
    total.update({k: quantity(v) for k, v in pod_level.items() if k in ("cpu", "memory")})
    total = _add(total, spec.get("overhead") or {})
    return {k: amount(k, v) for k, v in total.items()}


def allocatable(node: Obj) -> dict[str, int]:
    """A node's allocatable resources, as the scheduler compares them (`pods` is a count)."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    return {k: amount(k, quantity(v)) for k, v in alloc.items()}


def _expression(labels: Mapping[str, str], expr: Obj) -> bool:
    """One matchExpression of a node selector term (In, NotIn, Exists, DoesNotExist, Gt, Lt)."""
    key, op, values = expr.get("key", ""), expr.get("operator"), expr.get("values") or []
    present = key in labels
    match op:
        case "In":
            return present and labels[key] in values
        case "NotIn":
            return not present or labels[key] not in values
        case "Exists":
            return present
        case "DoesNotExist":
            return not present
        case "Gt" | "Lt":
            if not present or len(values) != 1 or not _INTEGER.fullmatch(labels[key]) \
                    or not _INTEGER.fullmatch(str(values[0])):
                return False
            have, bound = int(labels[key]), int(values[0])
            return have > bound if op == "Gt" else have < bound
    return False


def term_matches(term: Obj, node: Obj) -> bool:
    """One nodeSelectorTerm: every matchExpression on the labels and every matchField (metadata.name)
    holds; a term with neither matches no node."""
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False
    labels = node["metadata"].get("labels") or {}
    name = {"metadata.name": node["metadata"]["name"]}
    return (all(_expression(labels, e) for e in exprs)
            and all(e.get("key") == "metadata.name" and e.get("operator") in ("In", "NotIn")
                    and _expression(name, e) for e in fields))


def excluded_by(pod: Obj, node: Obj) -> tuple[str, str] | None:
    """What excludes the node, and why: ("nodeSelector", …) or ("nodeAffinity", …); None: nothing does."""
    labels = node["metadata"].get("labels") or {}
    wrong = {k: v for k, v in (pod["spec"].get("nodeSelector") or {}).items() if labels.get(k) != v}
    if wrong:
        return "nodeSelector", "its nodeSelector wants " + ", ".join(
            f"{k}={v} (the node has {k + '=' + labels[k] if k in labels else 'no ' + k})"
            for k, v in sorted(wrong.items()))
    required = (((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if required is not None and not any(term_matches(t, node) for t in required.get("nodeSelectorTerms") or []):
        return "nodeAffinity", "no nodeSelectorTerm of its required node affinity matches the node"
    return None


def tolerates(toleration: Obj, taint: Obj) -> bool:
    """A toleration tolerates a taint (an empty effect matches every effect, an empty key with Exists every key)."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("key") and toleration["key"] != taint.get("key"):
        return False
    match toleration.get("operator") or "Equal":
        case "Exists":
            return True
        case "Equal":
            return bool((toleration.get("value") or "") == (taint.get("value") or ""))
    return False


def tolerated(pod: Obj, taint: Obj) -> bool:
    """Some toleration of the pod tolerates the taint."""
    return any(tolerates(t, taint) for t in pod["spec"].get("tolerations") or [])


def selects(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """A label selector (matchLabels and matchExpressions) selects these labels; None selects nothing."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    ops = {"In", "NotIn", "Exists", "DoesNotExist"}
    return all(e.get("operator") in ops and _expression(labels, e) for e in selector.get("matchExpressions") or [])


def anti_affinity_terms(pod: Obj) -> list[Obj]:
    """The pod's required pod anti-affinity terms."""
    anti = (pod["spec"].get("affinity") or {}).get("podAntiAffinity") or {}
    return list(anti.get("requiredDuringSchedulingIgnoredDuringExecution") or [])


def term_selects(pod: Obj, term: Obj, other: Obj) -> bool:
    """An affinity term of `pod` selects `other`: its namespaces (the pod's own when neither
    namespaces nor namespaceSelector is given; `{}` as namespaceSelector: every namespace; any other
    namespaceSelector adds nothing, as the snapshot has no namespace labels) and its label selector,
    with matchLabelKeys and mismatchLabelKeys taken from the pod's own labels."""
    own = pod["metadata"].get("labels") or {}
    namespaces: Iterable[str] = term.get("namespaces") or []
    ns_selector = term.get("namespaceSelector")
    if not namespaces and ns_selector is None:
        namespaces = [pod["metadata"].get("namespace", "")]
    if ns_selector != {} and other["metadata"].get("namespace", "") not in namespaces:
        return False
    selector = term.get("labelSelector")
    if selector is not None:
        extra = [{"key": k, "operator": "In", "values": [own[k]]} for k in term.get("matchLabelKeys") or [] if k in own]
        extra += [{"key": k, "operator": "NotIn", "values": [own[k]]}
                  for k in term.get("mismatchLabelKeys") or [] if k in own]
        selector = {**selector, "matchExpressions": [*(selector.get("matchExpressions") or []), *extra]}
    return selects(selector, other["metadata"].get("labels") or {})


def bind_floor(pod: Obj) -> float | None:
    """The earliest its Binding can have been (epoch seconds): its PodScheduled=True condition's
    lastTransitionTime, and no earlier than its creation; None if neither is known."""
    times = [pod["metadata"].get("creationTimestamp")]
    times += [c.get("lastTransitionTime") for c in (pod.get("status") or {}).get("conditions") or []
              if c.get("type") == "PodScheduled" and c.get("status") == "True"]
    known = [timestamp(t) for t in times if t]
    return max(known) if known else None


def timestamp(value: str) -> float:
    """An RFC 3339 time as epoch seconds."""
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def ref(pod: Obj) -> str:
    """namespace/name."""
    return f"{pod['metadata'].get('namespace', '')}/{pod['metadata']['name']}"


def terminated(pod: Obj) -> bool:
    """Succeeded, Failed or being deleted: it holds no place on its node any more."""
    return pod["status"].get("phase") in ("Succeeded", "Failed") or bool(pod["metadata"].get("deletionTimestamp"))
