"""Problems found in a profile or scenario, and the error that carries them (capped, one per line)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

Loc = tuple[str | int, ...]
MAX_REPORTED = 20  # problems listed one by one; the rest are counted ("… and N more")
MAX_KEY_CHARS = 64  # a longer key is cut in a field path (an unknown key can be any size)


def printable(text: str) -> str:
    """Control and other unprintable characters escaped, so a problem stays on one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def format_path(loc: Loc) -> str:
    """('spec', 'rules', 0, 'fault') → 'spec.rules[0].fault'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        key = printable(part if len(part) <= MAX_KEY_CHARS else part[: MAX_KEY_CHARS - 1] + "…")
        out += f".{key}" if out else key
    return out


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
        text = f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"
        return printable(text)

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
    """Input that cannot be loaded; str() lists the problems, one per line, the excess counted."""

    def __init__(self, problems: Iterable[Problem], omitted: int = 0) -> None:
        found = list(problems)
        self.problems = found[:MAX_REPORTED]
        self.omitted = len(found) - len(self.problems) + omitted
        lines = [str(p) for p in self.problems]
        if self.omitted:
            source = self.problems[-1].source if self.problems else "<input>"
            lines.append(printable(f"{source}: … and {self.omitted} more problems"))
        super().__init__("\n".join(lines))
