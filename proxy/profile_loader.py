"""Load FaultProfiles from YAML or JSON text; every error names file:line:col and the field path."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from proxy.profile import FaultProfile

Loc = tuple[str | int, ...]
Mark = tuple[int, int]  # 1-based line, column


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a profile, and where."""

    source: str
    line: int | None
    column: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = self.source
        if self.line is not None:
            where += f":{self.line}:{self.column}"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"

    def as_dict(self) -> dict[str, object]:
        """JSON form, as the control plane returns it with a 422."""
        return {
            "source": self.source,
            "line": self.line,
            "column": self.column,
            "path": self.path,
            "message": self.message,
        }


class ProfileError(ValueError):
    """A profile that cannot be loaded; str() lists every problem, one per line."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def format_path(loc: Loc) -> str:
    """('spec', 'rules', 0, 'fault') → 'spec.rules[0].fault'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class _Positions:
    """Where each key and value of a composed YAML document sits."""

    def __init__(self) -> None:
        self.keys: dict[Loc, Mark] = {}
        self.values: dict[Loc, Mark] = {}

    def lookup(self, loc: Loc, at_key: bool) -> Mark | None:
        """The mark of loc (its key if asked and known), else of its nearest known ancestor."""
        if at_key and loc in self.keys:
            return self.keys[loc]
        for n in range(len(loc), -1, -1):
            if loc[:n] in self.values:
                return self.values[loc[:n]]
        return None


def _mark(node: yaml.Node) -> Mark:
    return node.start_mark.line + 1, node.start_mark.column + 1


def _to_python(
    loader: yaml.SafeLoader, node: yaml.Node, loc: Loc, pos: _Positions, source: str
) -> Any:
    """Build plain data from a YAML node, recording positions and refusing duplicate keys."""
    pos.values[loc] = _mark(node)
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)
        out: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str | int) or isinstance(key, bool):
                line, col = _mark(key_node)
                raise ProfileError([Problem(source, line, col, format_path(loc), "keys must be strings")])
            if key in out:
                line, col = _mark(key_node)
                path = format_path((*loc, key))
                raise ProfileError([Problem(source, line, col, path, "duplicate key")])
            pos.keys[(*loc, key)] = _mark(key_node)
            out[key] = _to_python(loader, value_node, (*loc, key), pos, source)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(loader, n, (*loc, i), pos, source) for i, n in enumerate(node.value)]
    return loader.construct_object(node, deep=True)


def compose(text: str, source: str) -> tuple[Any, _Positions]:
    """Plain data from YAML text, and where each key and value sits."""
    pos = _Positions()
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise ProfileError([Problem(source, None, None, "", "empty document")])
        return _to_python(loader, node, (), pos, source), pos
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        raise ProfileError(
            [Problem(source, line, col, "", f"not valid YAML: {e.problem or e.context}")]
        ) from None
    except yaml.YAMLError as e:
        raise ProfileError([Problem(source, None, None, "", f"not valid YAML: {e}")]) from None
    finally:
        loader.dispose()


_MESSAGES = {
    "extra_forbidden": "unknown field",
    "missing": "required field is missing",
}


def problem_from(err: Any, pos: _Positions | None, source: str) -> Problem:
    """One pydantic error as a Problem with file:line:col."""
    loc: Loc = tuple(err["loc"])
    kind = err["type"]
    message = _MESSAGES.get(kind) or str(err["msg"]).removeprefix("Value error, ")
    mark = pos.lookup(loc if kind != "missing" else loc[:-1], at_key=kind == "extra_forbidden") if pos else None
    line, col = mark if mark else (None, None)
    return Problem(source, line, col, format_path(loc), message)


def validate(data: Any, source: str, pos: _Positions | None = None) -> FaultProfile:
    """Validate plain data as a FaultProfile; raises ProfileError."""
    if not isinstance(data, dict):
        mark = pos.lookup((), False) if pos else None
        line, col = mark if mark else (None, None)
        raise ProfileError([Problem(source, line, col, "", "a profile must be a mapping")])
    try:
        return FaultProfile.model_validate(data)
    except ValidationError as e:
        raise ProfileError(problem_from(err, pos, source) for err in e.errors()) from None


def load_text(text: str, source: str = "<input>") -> FaultProfile:
    """Parse YAML (or JSON, which is YAML) text into a validated profile."""
    data, pos = compose(text, source)
    return validate(data, source, pos)


def load_file(path: Path) -> FaultProfile:
    """Load one profile file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ProfileError([Problem(str(path), None, None, "", f"cannot read: {e}")]) from None
    return load_text(text, str(path))


def to_yaml(profile: FaultProfile) -> str:
    """A profile as YAML, in the same shape it is written in."""
    data = profile.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)
    data.setdefault("spec", {})
    return yaml.safe_dump(data, sort_keys=False)
