"""Shell-style glob lists compiled once into fast predicates."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Sequence

_GLOB_CHARS = frozenset("*?[")


def glob_matcher(patterns: Sequence[str]) -> Callable[[str], bool]:
    """Any-of shell globs; literal patterns become a set lookup."""
    literals = frozenset(p for p in patterns if not _GLOB_CHARS & set(p))
    globs = [p for p in patterns if _GLOB_CHARS & set(p)]
    if not globs:
        return literals.__contains__
    regex = re.compile("|".join(fnmatch.translate(g) for g in globs))
    return lambda value: value in literals or regex.match(value) is not None
