"""A profile sent as JSON is read as YAML (1.1), which reads two things in JSON otherwise: a surrogate
pair escape (\\ud83d\\ude00, refused) and a number like 1e5 (a string). Both are rewritten as YAML
writes them (\\U0001f600, 1.0e+5) first, and the columns of any problem found are given back."""

from __future__ import annotations

import dataclasses
import re

from kube_fault_proxy.proxy.profiles.problems import ProfileError

# A string, or a number with an exponent; everything else in JSON reads the same in YAML.
TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|-?[0-9]+(?:\.[0-9]+)?[eE][-+]?[0-9]+')
# A pair of \u escapes, high then low surrogate, after an even number of backslashes (not itself escaped).
PAIR = re.compile(r"(?<!\\)((?:\\\\)*)\\u([dD][89abAB][0-9a-fA-F]{2})\\u([dD][c-fC-F][0-9a-fA-F]{2})")
NUMBER = re.compile(r"(-?[0-9]+)(\.[0-9]+)?[eE]([-+]?)([0-9]+)")

Shifts = dict[int, list[tuple[int, int]]]  # per 1-based line: (YAML column after an edit, characters it removed)


def _astral(m: re.Match[str]) -> str:
    code = 0x10000 + ((int(m.group(2), 16) - 0xD800) << 10) + (int(m.group(3), 16) - 0xDC00)
    return f"{m.group(1)}\\U{code:08x}"


def _as_yaml(token: str) -> str:
    if token.startswith('"'):
        return PAIR.sub(_astral, token) if "\\u" in token else token
    m = NUMBER.fullmatch(token)
    assert m is not None  # TOKEN's number is NUMBER's
    return f"{m.group(1)}{m.group(2) or '.0'}e{m.group(3) or '+'}{m.group(4)}"


def as_yaml(text: str) -> tuple[str, Shifts]:
    """The same JSON text as YAML reads it, and where it was edited."""
    shifts: Shifts = {}
    out: list[str] = []
    done = 0
    line, line_start, delta = 1, 0, 0  # the line, where it starts, characters removed on it so far
    for m in TOKEN.finditer(text):
        new = _as_yaml(m.group())
        if new == m.group():
            continue
        if (newlines := text.count("\n", done, m.start())) > 0:
            line, line_start, delta = line + newlines, text.rfind("\n", 0, m.start()) + 1, 0
        delta += len(m.group()) - len(new)
        shifts.setdefault(line, []).append((m.end() - line_start - delta + 1, len(m.group()) - len(new)))
        out += [text[done : m.start()], new]
        done = m.end()
    if not shifts:
        return text, shifts
    out.append(text[done:])
    return "".join(out), shifts


def restore(error: ProfileError, shifts: Shifts) -> ProfileError:
    """The error with each problem's column where it is in the text as sent."""
    if not shifts:
        return error

    def column(line: int | None, col: int | None) -> int | None:
        if line is None or col is None:
            return col
        return col + sum(removed for after, removed in shifts.get(line, []) if after <= col)

    return ProfileError([dataclasses.replace(p, column=column(p.line, p.column)) for p in error.problems],
                        error.omitted)
