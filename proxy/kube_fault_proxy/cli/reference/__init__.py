"""The reference pages of the manual (docs/reference/), generated from the code: never edited by hand.

Regenerate with `python -m kube_fault_proxy.cli.reference --write docs/reference`; `--check` says which differ."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kube_fault_proxy.cli.reference import commands, control, crds, environment, library, models, plugin
from kube_fault_proxy.cli.reference.markdown import page


def index_page() -> str:
    """docs/reference/index.md: what the reference holds and how it is kept true."""
    return page("Reference", "Every page here is generated from the code (the pydantic models, the argument parser, "
                "the control plane's OpenAPI document, the metric collector, the journal's record list, the pytest "
                "plugin, the CRDs and the shipped files), and a unit test fails when a page differs from what the "
                "code produces, or when a fault kind, a field, a CLI option, a route or its parameter, a plugin "
                "setting or an environment variable has no description.", [
                    "- [Fault profile format](profile.md): the FaultProfile file, rule by rule.",
                    "- [Fault kinds](fault-kinds.md): every kind with every setting, its bounds and its default.",
                    "- [Command line](cli.md): every command and option.",
                    "- [Control API](control-api.md): every route of the control plane.",
                    "- [Prometheus metrics](metrics.md): every family `/metrics` serves.",
                    "- [Journal records](journal.md): every event the journal records.",
                    "- [Scenario format](scenario.md): the Scenario file, the events a step waits for, the invariants.",
                    "- [Shipped profiles, scenarios and patches](shipped.md).",
                    "- [pytest plugin](pytest-plugin.md): its settings, fixtures, marker and helpers.",
                    "- [Environment variables](environment.md): every `KFP_*` variable.",
                    "- [Custom resources](crds.md): the FaultProfile and FaultActivation objects, field by field.",
                ])


PAGES: dict[str, Callable[[], str]] = {
    "index.md": index_page,
    "profile.md": models.profile_page,
    "fault-kinds.md": models.fault_kinds_page,
    "cli.md": commands.cli_page,
    "control-api.md": control.api_page,
    "metrics.md": control.metrics_page,
    "journal.md": library.journal_page,
    "scenario.md": models.scenario_page,
    "shipped.md": library.shipped_page,
    "pytest-plugin.md": plugin.plugin_page,
    "environment.md": environment.environment_page,
    "crds.md": crds.crds_page,
}

REGENERATE = "python -m kube_fault_proxy.cli.reference --write docs/reference"


def render() -> dict[str, str]:
    """Every page's file name and text."""
    return {name: make() for name, make in PAGES.items()}


def write(directory: Path) -> list[Path]:
    """Write every page into the directory (made if missing); returns the files."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, content in render().items():
        path = directory / name
        path.write_text(content, encoding="utf-8")
        written.append(path)
    return written


def stale(directory: Path) -> list[str]:
    """The pages in the directory that differ from what the code produces now (or are missing)."""
    out = []
    for name, content in render().items():
        path = directory / name
        if not path.is_file() or path.read_text(encoding="utf-8") != content:
            out.append(name)
    return out


def undescribed() -> list[str]:
    """What the reference would show without a description: fault kinds (and their examples), fields, CLI options,
    control routes and their parameters, the pytest plugin's parts, environment variables, the CRDs' fields."""
    doc = control.openapi()
    routes = [f"{m} {p}" for m, p, op in control.operations(doc) if not op.get("description")]
    return (models.undescribed() + commands.undescribed(commands.full_parser()) + routes
            + control.undescribed_parameters(doc) + plugin.undescribed() + environment.undescribed()
            + crds.undescribed())
