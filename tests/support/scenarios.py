"""Scenario files for schema tests: the fixed header, then a spec or a timeline."""

from __future__ import annotations

from pathlib import Path

HEAD = "apiVersion: kube-fault-proxy/v1\nkind: Scenario\nmetadata: {name: s}\n"


def scenario_file(tmp_path: Path, spec: str) -> Path:
    """`s.yaml` in tmp_path: the header, then `spec` (YAML text starting with `spec:`)."""
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + spec)
    return path


def timeline(tmp_path: Path, steps: str) -> Path:
    """A scenario whose spec is only these timeline steps (YAML list items, indented 4)."""
    return scenario_file(tmp_path, "spec:\n  timeline:\n" + steps)
