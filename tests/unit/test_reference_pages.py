"""The reference pages for the pytest plugin, the environment variables, the CRDs and the control API's parameters:
complete against the code, and their completeness checks can fail."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from kube_fault_proxy.cli.reference import control, crds, environment, plugin
from kube_fault_proxy.proxy.control.openapi import UNGUARDED_401
from kube_fault_proxy.proxy.crd import objects
from kube_fault_proxy.rig import pytest_plugin

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "reference"
VARIABLE = re.compile(r"\bKFP_[A-Z0-9]+(?:_[A-Z0-9]+)*\b")
# Where a KFP_* variable can be read or set: the package, the scripts, the tests, the benchmarks, the images and
# manifests (the manual and the reference are left out: they describe, they do not read).
SOURCES = ["proxy", "scripts", "tests", "bench", "deploy", "Dockerfile", "docker-compose.yaml",
           "docker-compose.yunikorn-local.yaml"]


def named_variables(paths: list[Path]) -> set[str]:
    """Every KFP_* name in the text files under the paths; left out: recorded measurements (bench/results), the
    reference generator (it lists them all) and this file (it names one that does not exist)."""
    names: set[str] = set()
    for top in paths:
        for path in [top] if top.is_file() else top.rglob("*"):
            if path.is_file() and not {"results", "reference"} & set(path.parts) and path != Path(__file__):
                try:
                    names |= set(VARIABLE.findall(path.read_text(encoding="utf-8")))
                except UnicodeDecodeError:
                    continue
    return names


def test_every_kfp_variable_is_in_the_reference_and_none_there_is_named_nowhere() -> None:
    named = named_variables([ROOT / s for s in SOURCES])
    listed = {v.name for v in environment.ALL}
    assert {"KFP_STATE_DIR", "KFP_CONTROL_TOKEN", "KFP_CACHE_DIR"} <= named
    assert named - listed == set(), "describe it in cli/reference/environment.py"
    assert listed - named == set(), "no longer read: remove it from cli/reference/environment.py"
    assert len(listed) == len(environment.ALL), "a variable listed twice"


def test_a_new_variable_is_found(tmp_path: Path) -> None:
    (tmp_path / "tool.py").write_text('os.environ.get("KFP_NEW_THING")  # and $KFP_STATE_DIR\n')
    assert named_variables([tmp_path]) == {"KFP_NEW_THING", "KFP_STATE_DIR"}


def test_the_environment_page_lists_every_variable() -> None:
    page = (DOCS / "environment.md").read_text(encoding="utf-8")
    for v in environment.ALL:
        assert f"| `{v.name}` |" in page


def _fixture_names_in_source() -> list[str]:
    """The plugin's fixtures as its source declares them (decorated with pytest.fixture), read without pytest."""
    tree = ast.parse(Path(pytest_plugin.__file__).read_text(encoding="utf-8"))
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for deco in node.decorator_list:
                target = deco.func if isinstance(deco, ast.Call) else deco
                if isinstance(target, ast.Attribute) and target.attr == "fixture":
                    names.append(node.name)
    return names


def test_the_plugin_page_has_every_fixture_with_its_scope() -> None:
    found = plugin.fixtures()
    assert [f.name for f in found] == _fixture_names_in_source()
    assert {f.name: f.scope for f in found}.items() >= {"faults": "function", "kfp_proxy": "session"}.items()
    page = (DOCS / "pytest-plugin.md").read_text(encoding="utf-8")
    for f in found:
        assert f"| `{f.name}` | {f.scope} |" in page


def test_the_plugin_page_has_every_setting_as_flag_and_ini_option() -> None:
    page = (DOCS / "pytest-plugin.md").read_text(encoding="utf-8")
    assert [o.flag for o in plugin.options()] == [f"--kube-fault-proxy-{n}" for n in pytest_plugin.SETTINGS]
    for name, (kind, _) in pytest_plugin.SETTINGS.items():
        flag = f"--kube-fault-proxy-{name}" + ("" if kind == "bool" else " VALUE")
        assert f"| `{flag}` | `kube_fault_proxy_{name.replace('-', '_')}` | {kind} |" in page
    assert "`--kube-fault-proxy-feature-gates VALUE`" in page


def test_the_plugin_page_has_the_marker_and_the_faults_methods() -> None:
    page = (DOCS / "pytest-plugin.md").read_text(encoding="utf-8")
    assert plugin.markers() == [("fault_profile(name, seed=None)", "activate this profile for the test")]
    assert "| `fault_profile(name, seed=None)` |" in page
    for method in ("activate(profile, seed=None, ttl=None)", "deactivate()", "injections()", "journal()"):
        assert f"| `{method}` |" in page


def test_a_plugin_setting_without_help_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(pytest_plugin.SETTINGS, "silent", ("string", ""))
    assert plugin.undescribed() == ["pytest option --kube-fault-proxy-silent"]


def test_the_crd_page_has_every_field_of_an_activation() -> None:
    page = (DOCS / "crds.md").read_text(encoding="utf-8")
    for model in [objects.ActivationSpec, *crds.STATUS_MODELS]:
        for name, info in model.model_fields.items():
            assert f"| `{info.alias or name}` |" in page, (model.__name__, name)
    assert "`faultprofiles.kube-fault-proxy.io`" in page and "`faultactivations.kube-fault-proxy.io`" in page
    assert crds.undescribed() == []


def test_the_control_api_page_says_the_tokenless_401_once() -> None:
    page = (DOCS / "control-api.md").read_text(encoding="utf-8")
    intro, tables = page.split("\n\n", 3)[2], page.split("\n\n", 3)[3]
    assert UNGUARDED_401 not in page
    assert "`401` Unauthorized" in intro and "401" not in tables
    guarded = [op for _, _, op in control.operations(control.openapi()) if op.get("security")]
    assert len(guarded) >= 10 and page.count("| when set |") == len(guarded)


def test_every_control_parameter_is_described_on_the_page() -> None:
    doc = control.openapi()
    assert control.undescribed_parameters(doc) == []
    page = (DOCS / "control-api.md").read_text(encoding="utf-8")
    assert "| `limit` | query | integer | ≥ 1, ≤ 10000 | `1000` | return at most this many records" in page
    assert "| `name` | path | string |" in page


def test_a_parameter_without_a_description_is_reported() -> None:
    doc = {"paths": {"/v1/x": {"get": {"parameters": [
        {"name": "limit", "in": "query", "schema": {"type": "integer"}},
        {"name": "since", "in": "query", "schema": {"type": "integer", "description": "after this seq"}},
    ]}}}}
    assert control.undescribed_parameters(doc) == ["GET /v1/x limit"]
