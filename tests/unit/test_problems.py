"""Problems print one per line, escaped, and the excess is counted, not listed."""

from __future__ import annotations

import pytest
from kube_fault_proxy.proxy.profiles.problems import MAX_REPORTED, Problem, ProfileError, format_path


@pytest.mark.parametrize(
    ("loc", "expected"),
    [
        (("spec", "rules", 0, "fault"), "spec.rules[0].fault"),
        (("spec", "a\nb"), "spec.a\\nb"),
        (("spec", "k" * 100), "spec." + "k" * 63 + "…"),
        ((), ""),
    ],
    ids=["plain", "newline-in-key", "long-key", "root"],
)
def test_format_path(loc: tuple[str | int, ...], expected: str) -> None:
    assert format_path(loc) == expected


def test_a_problem_is_one_line() -> None:
    assert str(Problem("p.yaml", 1, 2, "spec", "bad\x00value\nhere")) == "p.yaml:1:2: spec: bad\\x00value\\nhere"


def test_problems_are_capped_and_counted() -> None:
    found = [Problem("p.yaml", i, 1, f"spec.k{i}", "unknown field") for i in range(1, 1001)]
    error = ProfileError(found)
    lines = str(error).splitlines()
    assert len(error.problems) == MAX_REPORTED and error.omitted == 1000 - MAX_REPORTED
    assert lines[0] == "p.yaml:1:1: spec.k1: unknown field"
    assert lines[-1] == f"p.yaml: … and {1000 - MAX_REPORTED} more problems"
    assert len(lines) == MAX_REPORTED + 1


def test_omitted_problems_given_by_count() -> None:
    error = ProfileError([Problem("p.yaml", 1, 1, "", "x")], omitted=5)
    assert str(error).splitlines()[-1] == "p.yaml: … and 5 more problems"
