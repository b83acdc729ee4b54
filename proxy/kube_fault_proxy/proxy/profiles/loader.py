"""Load FaultProfiles from YAML or JSON text; every error names file:line:col and the field path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from kube_fault_proxy.proxy.profiles.problems import MAX_REPORTED, Loc, Problem, ProfileError, format_path
from kube_fault_proxy.proxy.profiles.profile import FaultProfile
from kube_fault_proxy.proxy.profiles.yaml_reader import LIMITS, Limits, Positions, compose

__all__ = ["LIMITS", "Limits", "Problem", "ProfileError", "compose", "format_path", "load_file", "load_model",
           "load_text", "problem_from", "read_text", "to_yaml", "validate"]


_MESSAGES = {
    "extra_forbidden": "unknown field",
    "missing": "required field is missing",
}


def problem_from(err: Any, pos: Positions | None, source: str) -> Problem:
    """One pydantic error as a Problem with file:line:col."""
    loc: Loc = tuple(err["loc"])
    kind = err["type"]
    message = _MESSAGES.get(kind) or str(err["msg"]).removeprefix("Value error, ")
    mark = pos.lookup(loc if kind != "missing" else loc[:-1], at_key=kind == "extra_forbidden") if pos else None
    line, col = mark if mark else (None, None)
    return Problem(source, line, col, format_path(loc), message)


def validate(data: Any, source: str, pos: Positions | None = None) -> FaultProfile:
    """Validate plain data as a FaultProfile; raises ProfileError."""
    if not isinstance(data, dict):
        mark = pos.lookup((), False) if pos else None
        line, col = mark if mark else (None, None)
        raise ProfileError([Problem(source, line, col, "", "a profile must be a mapping")])
    return _validated(FaultProfile, data, source, pos)


def _validated[M: BaseModel](model: type[M], data: Any, source: str, pos: Positions | None) -> M:
    """`data` validated as `model`; ProfileError with each pydantic error as a Problem (file:line:col, field)."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        errors = e.errors(include_url=False, include_input=False)
        raise ProfileError((problem_from(err, pos, source) for err in errors[:MAX_REPORTED]),
                           omitted=max(0, len(errors) - MAX_REPORTED)) from None


def load_model[M: BaseModel](path: Path, model: type[M], not_a_mapping: str) -> M:
    """A YAML file of the project's own (a catalogue, a manifest) validated as `model`; ProfileError names
    file:line:col and the field of every problem (`not_a_mapping`: what a file that is no mapping is told)."""
    source = str(path)
    data, pos = compose(read_text(path), source)
    if not isinstance(data, dict):
        raise ProfileError([Problem(source, 1, 1, "", not_a_mapping)])
    return _validated(model, data, source, pos)


def load_text(text: str, source: str = "<input>", limits: Limits = LIMITS) -> FaultProfile:
    """Parse YAML (or JSON, which is YAML) text into a validated profile; raises ProfileError only."""
    data, pos = compose(text, source, limits)
    return validate(data, source, pos)


def read_text(path: Path, limits: Limits = LIMITS) -> str:
    """A profile or scenario file's text, refused unread when it is larger than the limit."""
    try:
        size = path.stat().st_size
        if size > limits.max_bytes:
            raise ProfileError([Problem(str(path), None, None, "",
                                        f"{size:,} bytes is too large (at most {limits.max_bytes:,})")])
        with path.open("rb") as f:
            return f.read(limits.max_bytes + 1).decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ProfileError([Problem(str(path), None, None, "", f"cannot read: {e}")]) from None


def load_file(path: Path, limits: Limits = LIMITS) -> FaultProfile:
    """Load one profile file."""
    return load_text(read_text(path, limits), str(path), limits)


def to_yaml(profile: FaultProfile) -> str:
    """A profile as YAML, in the same shape it is written in."""
    data = profile.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)
    data.setdefault("spec", {})
    return yaml.safe_dump(data, sort_keys=False)
