"""Fault kinds are declared once (KINDS): a kind module that is not registered, or a place that does not follow
the registry — the `Fault` one-of, the CRD schema, the committed CRDs, the reference — fails here."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_fault_proxy.proxy import faults
from kube_fault_proxy.proxy.crd.definitions import profile_crd
from kube_fault_proxy.proxy.faults import KINDS, Fault, FaultSpec

ROOT = Path(__file__).resolve().parents[2]


def test_every_kind_module_is_registered_once() -> None:
    declared = set()
    for info in pkgutil.iter_modules(faults.__path__):
        module = importlib.import_module(f"{faults.__name__}.{info.name}")
        declared |= {cls for _, cls in inspect.getmembers(module, inspect.isclass)
                     if issubclass(cls, FaultSpec) and cls is not FaultSpec and cls.__module__ == module.__name__}
    assert declared == set(KINDS), "a FaultSpec in proxy/faults/ that KINDS does not list, or the reverse"
    assert len({k.kind for k in KINDS}) == len(KINDS)


@pytest.mark.parametrize("kind", KINDS, ids=[k.kind for k in KINDS])
def test_every_kind_has_a_test_file_of_its_own(kind: type[FaultSpec]) -> None:
    """A kind's tests live in tests/unit/test_<its module>.py (a new fault: one module, one test file), and that
    file tests it: it names the kind's class or its key."""
    module = kind.__module__.rsplit(".", 1)[-1]
    path = ROOT / "tests" / "unit" / f"test_{module}.py"
    assert path.is_file(), f"{kind.kind} (proxy/faults/{module}.py) has no tests/unit/test_{module}.py"
    text = path.read_text()
    assert "def test_" in text and (kind.__name__ in text or kind.kind in text), f"{path.name} does not test {kind.kind}"


def test_the_fault_one_of_has_exactly_the_registered_kinds_in_order() -> None:
    assert list(Fault.model_fields) == [k.kind for k in KINDS]
    for k in KINDS:
        assert Fault.model_fields[k.kind].annotation == k | None
    schema = Fault.model_json_schema()
    assert schema["oneOf"] == [{"required": [k.kind]} for k in KINDS]


def _fault_schema(crd: dict[str, Any]) -> dict[str, Any]:
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rule = spec["properties"]["rules"]["items"]
    return dict(rule["properties"]["fault"])


def test_the_crd_and_the_committed_crds_carry_every_kind() -> None:
    fault = _fault_schema(profile_crd())
    assert list(fault["properties"]) == [k.kind for k in KINDS]
    assert fault["oneOf"] == [{"required": [k.kind]} for k in KINDS]
    committed = [d for d in yaml.safe_load_all((ROOT / "deploy" / "crds.yaml").read_text()) if d]
    [profile] = [d for d in committed if d["spec"]["names"]["kind"] == "FaultProfile"]
    assert _fault_schema(profile) == fault, "deploy/crds.yaml is stale: kube-fault-proxy crds > deploy/crds.yaml"


def test_the_reference_has_a_section_per_kind() -> None:
    page = (ROOT / "docs" / "reference" / "fault-kinds.md").read_text()
    assert [k.kind for k in KINDS] == [line[3:] for line in page.splitlines()
                                       if line.startswith("## ") and line[3:] in {k.kind for k in KINDS}]


def test_the_engine_and_the_addon_import_no_particular_kind() -> None:
    """They work through FaultSpec (applies_to, plan, follows_up_relist) and a plan's steps, never a kind."""
    kind_modules = {k.__module__ for k in KINDS}
    package = ROOT / "proxy" / "kube_fault_proxy" / "proxy"
    for source in [package / "engine.py", *sorted((package / "mitm").glob("*.py"))]:
        text = source.read_text()
        assert not [m for m in kind_modules if f"from {m} import" in text or f"import {m}" in text], source


def test_every_kind_carries_its_search_grammar_and_the_grammar_follows_the_registry() -> None:
    """Each kind says where the search draws it, draws settings the strict loader accepts, and names a registered
    kind as its weaker form; the grammar's groups are the registry's, in its order, every kind in exactly one."""
    import random

    from kube_fault_proxy.proxy.faults.base import SEARCH_GROUPS, Draw
    from kube_fault_proxy.rig.search import grammar
    from kube_fault_proxy.rig.search.waist import CONTROLLERS, SCHEDULER

    names = [k.kind for k in KINDS]
    assert tuple(names) == grammar.KNOWN_KINDS, "the search draws kinds in the registry's order"
    assert set(grammar.ALL_KINDS).isdisjoint(grammar.VIEW_KINDS)
    for kind in KINDS:
        assert kind.search_group in SEARCH_GROUPS, kind
        assert kind.weaker is None or kind.weaker in names, kind
        if kind.weaker:
            Fault.model_validate({kind.weaker: KINDS[names.index(kind.weaker)].weakest()})
        drawn = set()
        for seed in range(200):
            for waist in (SCHEDULER, CONTROLLERS):
                match_name = waist.matches[seed % len(waist.matches)][0]
                settings = kind.draw(random.Random(seed), Draw(match_name, waist.hold_until))
                Fault.model_validate({kind.kind: settings})  # the strict loader's model: raises if not accepted
                drawn.add(repr(sorted(settings.items())))
        assert drawn, kind
