"""Selectors compiled into fast predicates over a RequestIdentity."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter

from kube_fault_proxy.proxy.profiles.profile import Selector
from kube_fault_proxy.proxy.requests.identity import RequestIdentity
from kube_fault_proxy.proxy.schema.globs import glob_matcher

Check = Callable[[RequestIdentity], bool]
_GLOB_FIELDS: tuple[tuple[str, Callable[[RequestIdentity], str]], ...] = (
    ("versions", attrgetter("version")),
    ("resources", attrgetter("resource")),
    ("subresources", attrgetter("subresource")),
    ("namespaces", attrgetter("namespace")),
    ("names", attrgetter("name")),
    ("userAgents", attrgetter("user_agent")),
    ("paths", attrgetter("path")),
)


def _field(getter: Callable[[RequestIdentity], str], patterns: Sequence[str]) -> Check:
    matches = glob_matcher(patterns)
    return lambda ident: matches(getter(ident))


def compile_selector(sel: Selector) -> Check:
    """A predicate that is true when every set field of the selector matches."""
    checks: list[Check] = []
    resource_only = any(
        v is not None
        for v in (sel.groups, sel.versions, sel.resources, sel.subresources,
                  sel.namespaces, sel.names, sel.targetNodes)
    )  # fmt: skip
    if resource_only:
        checks.append(lambda ident: ident.is_resource)
    if sel.verbs is not None:
        verbs = frozenset(sel.verbs)
        checks.append(lambda ident: ident.verb in verbs)
    if sel.groups is not None:
        groups = ["" if g == "core" else g for g in sel.groups]
        checks.append(_field(lambda i: i.group, groups))
    for name, getter in _GLOB_FIELDS:
        patterns = getattr(sel, name)
        if patterns is not None:
            checks.append(_field(getter, patterns))
    if sel.targetNodes is not None:
        nodes = glob_matcher(sel.targetNodes)
        checks.append(lambda i: i.target_node is not None and nodes(i.target_node))
    if not checks:
        return lambda ident: True
    if len(checks) == 1:
        return checks[0]
    return lambda ident: all(check(ident) for check in checks)
