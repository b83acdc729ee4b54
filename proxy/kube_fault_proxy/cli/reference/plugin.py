"""The pytest plugin's reference, read from the plugin itself: its options, fixtures, marker and helpers.

The options and the marker are what the plugin's own hooks register, called here with a recorder that stands for
pytest's parser and config; the fixtures are the module's fixture functions."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any

from kube_fault_proxy.cli.reference.markdown import code, page, table, text
from kube_fault_proxy.rig import pytest_plugin

HELPERS = (pytest_plugin.profiles_in, pytest_plugin.assert_clean, pytest_plugin.assert_violates)


@dataclass
class Option:
    """One setting: its command-line flag, its ini option, its type and help."""

    flag: str
    ini: str
    kind: str
    help: str


@dataclass
class _Recorder:
    """Stands for pytest's Parser (and an option group) and Config: records what the plugin registers."""

    flags: dict[str, str] = field(default_factory=dict)  # flag -> help
    inis: dict[str, tuple[str, str]] = field(default_factory=dict)  # ini name -> (help, type)
    lines: list[tuple[str, str]] = field(default_factory=list)  # (ini name, line): markers
    stash: dict[Any, Any] = field(default_factory=dict)
    inipath: None = None
    rootpath: str = "."

    def getgroup(self, name: str) -> _Recorder:
        return self

    def addoption(self, *flags: str, help: str = "", **_: Any) -> None:
        self.flags[flags[0]] = help

    def addini(self, name: str, help: str, type: str = "string", **_: Any) -> None:
        self.inis[name] = (help, type)

    def addinivalue_line(self, name: str, line: str) -> None:
        self.lines.append((name, line))

    def getoption(self, name: str) -> None:
        return None

    def getini(self, name: str) -> Any:
        return False if self.inis.get(name, ("", "string"))[1] == "bool" else ""


def _registered() -> _Recorder:
    recorder = _Recorder()
    pytest_plugin.pytest_addoption(recorder)  # type: ignore[arg-type]
    pytest_plugin.pytest_configure(recorder)  # type: ignore[arg-type]
    return recorder


def options() -> list[Option]:
    """Every setting, flag and ini option paired (the plugin registers them in the same order)."""
    recorder = _registered()
    return [Option(flag, ini, kind, help_text)
            for (flag, help_text), (ini, (_, kind)) in zip(recorder.flags.items(), recorder.inis.items(), strict=True)]


def markers() -> list[tuple[str, str]]:
    """(signature, meaning) of every marker the plugin registers."""
    return [tuple(line.split(": ", 1)) for name, line in _registered().lines if name == "markers"]  # type: ignore[misc]


@dataclass(frozen=True)
class Fixture:
    """A fixture the plugin provides."""

    name: str
    scope: str
    doc: str


def fixtures() -> list[Fixture]:
    """The plugin module's fixtures, in source order. (pytest keeps a fixture's scope on the object @pytest.fixture
    returns; should that change, none is found and tests/unit/test_reference_pages.py fails.)"""
    found = []
    for name, value in vars(pytest_plugin).items():
        marker = getattr(value, "_fixture_function_marker", None)
        if marker is not None:
            found.append(Fixture(marker.name or name, marker.scope, inspect.getdoc(value) or ""))
    return found


def _methods() -> Iterator[tuple[str, Callable[..., Any] | property]]:
    for name, member in vars(pytest_plugin.Faults).items():
        if not name.startswith("_") and (callable(member) or isinstance(member, property)):
            yield name, member


def _signature(name: str, member: Callable[..., Any] | property) -> str:
    if isinstance(member, property):
        return name
    sig = inspect.signature(inspect.unwrap(member))
    shown = [str(p).split(":", 1)[0] + (f"={p.default!r}" if p.default is not p.empty else "")
             for p in sig.parameters.values() if p.name != "self"]
    return f"{name}({', '.join(shown)})"


def _doc(member: Any) -> str:
    return " ".join((inspect.getdoc(member) or "").split())


def undescribed() -> list[str]:
    """Every option, fixture, marker, helper or `faults` method of the plugin with no description."""
    missing = [f"pytest option {o.flag}" for o in options() if not o.help]
    missing += [f"pytest fixture {f.name}" for f in fixtures() if not f.doc]
    missing += [f"pytest marker {m}" for m, meaning in markers() if not meaning]
    missing += [f"pytest helper {h.__name__}" for h in HELPERS if not _doc(h)]
    missing += [f"pytest faults.{n}" for n, m in _methods() if not _doc(m)]
    return missing


def entry_point() -> str:
    """The `pytest11` entry point the package declares for the plugin, as `name = module`."""
    [ep] = [ep for ep in entry_points(group="pytest11") if ep.value == pytest_plugin.__name__]
    return f"{ep.name} = {ep.value}"


def plugin_page() -> str:
    """docs/reference/pytest-plugin.md."""
    rows = [(code(o.flag + ("" if o.kind == "bool" else " VALUE")), code(o.ini), o.kind, text(o.help))
            for o in options()]
    fixture_rows = [(code(f.name), f.scope, text(" ".join(f.doc.split()))) for f in fixtures()]
    marker_rows = [(code(m), text(meaning)) for m, meaning in markers()]
    method_rows = [(code(_signature(n, m)), text(_doc(m))) for n, m in _methods()]
    helper_rows = [(code(f"{h.__name__}{inspect.signature(h)}".replace("'", "")), text(_doc(h))) for h in HELPERS]
    return page("pytest plugin", "Installed with the package and registered through its `pytest11` entry point "
                f"({code(entry_point())}): nothing to add to a `conftest.py`. Every setting is both a command-line "
                "flag and an ini option (in `pytest.ini`, or `[tool.pytest.ini_options]` of `pyproject.toml`); the "
                "flag wins. Set one of `url`, `kubeconfig` or `cluster`: the proxy is then attached to, started, or "
                "started with the local control plane.", [
                    "## Settings\n\n" + table(("flag", "ini option", "type", "what it sets"), rows),
                    "## Fixtures\n\n" + table(("fixture", "scope", "what it gives"), fixture_rows),
                    "## Marker\n\n" + table(("marker", "what it does"), marker_rows),
                    "## The `faults` handle\n\nWhat the `faults` fixture gives: a "
                    f"{code('kube_fault_proxy.rig.pytest_plugin.Faults')}. A call the proxy refuses fails the "
                    "test with the proxy's message.\n\n" + table(("method", "what it does"), method_rows),
                    "## Helpers\n\nImported from `kube_fault_proxy.rig.pytest_plugin`.\n\n"
                    + table(("function", "what it does"), helper_rows),
                ])

