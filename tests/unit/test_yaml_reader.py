"""Bounded YAML: hostile documents are refused cheaply, at a position, before anything expands."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable

import pytest
from kube_fault_proxy.proxy.profiles.loader import ProfileError, load_text
from kube_fault_proxy.proxy.profiles.yaml_reader import LIMITS, Limits, compose

HEADER = "apiVersion: kube-fault-proxy/v1\nkind: FaultProfile\nmetadata: {name: p}\n"


def laughs(levels: int, fan: int) -> str:
    """A "billion laughs" document: each level refers `fan` times to the one before."""
    lines = ["a0: &a0 lol"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * fan) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + f"\nspec: *a{levels}\n"


def wide_alias(size: int, uses: int) -> str:
    """Few aliases, each to a big sequence: expands to size * uses values."""
    items = ", ".join(["x"] * size)
    return f"big: &big [{items}]\nuse: [" + ", ".join(["*big"] * uses) + "]\n"


CASES: list[tuple[str, Callable[[], str], str]] = [
    ("billion-laughs", lambda: laughs(9, 9), "p.yaml:2:50: refused: more than 8 aliases"),
    ("laughs-435-bytes", lambda: laughs(6, 9), "p.yaml:2:50: refused: more than 8 aliases"),
    ("few-aliases-big-target", lambda: wide_alias(5000, 8),
     "refused: more than 20,000 values once aliases are expanded"),
    ("nul", lambda: HEADER + "spec: {seed: 1}\x00\n", "p.yaml:4:16: character U+0000 is not allowed in YAML"),
    ("bell", lambda: HEADER + "spec: {seed: \x07}\n", "p.yaml:4:14: character U+0007 is not allowed in YAML"),
    ("deep-flow", lambda: HEADER + "spec: " + "[" * 100_000 + "]" * 100_000, "p.yaml:4:"),
    ("deep-mapping", lambda: HEADER + "spec: " + "{a: " * 500 + "1" + "}" * 500,
     "p.yaml:4:131: refused: nested more than 32 levels deep"),
    ("deep-block", lambda: HEADER + "spec:\n" + "".join(" " * i + "- \n" for i in range(600)),
     "refused: nested more than 32 levels deep"),
    ("int-5000-digits", lambda: HEADER + "spec: {seed: " + "9" * 5000 + "}\n",
     "p.yaml:4:14: spec.seed: integer longer than 64 digits"),
    ("hex-int", lambda: HEADER + "spec: {seed: 0x" + "f" * 5000 + "}\n", "spec.seed: integer longer than 64 digits"),
    ("too-many-values", lambda: HEADER + "spec: {" + ", ".join(f"k{i}: 1" for i in range(20_000)) + "}\n",
     "refused: more than 20,000 values"),
    ("too-large", lambda: HEADER + "metadata: {description: '" + "x" * LIMITS.max_bytes + "'}\n",
     "p.yaml: 262,243 bytes is too large (at most 262,144)"),
    ("bad-date", lambda: HEADER + "spec: {seed: 2001-02-30}\n",
     "p.yaml:4:14: spec.seed: cannot read this value: day is out of range for month"),
    ("python-tag", lambda: HEADER + "spec: !!python/object:os.system {}\n",
     "p.yaml:4:7: spec: tag 'tag:yaml.org,2002:python/object:os.system' is not supported here"),
    ("python-scalar-tag", lambda: HEADER + "spec: {seed: !!python/name:os.system ''}\n",
     "p.yaml:4:14: not valid YAML: could not determine a constructor"),
    ("complex-key", lambda: HEADER + "spec: {? [a, b] : 1}\n", "p.yaml:4:10: spec: keys must be strings"),
    ("bad-escape", lambda: HEADER + 'spec: {seed: "\\ud800"}\n', "p.yaml:4:"),
]


@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_documents_are_refused_cheaply(make: Callable[[], str], expected: str) -> None:
    text = make()
    tracemalloc.start()
    started = time.process_time()  # CPU spent, not wall time: other work on the machine does not count
    try:
        with pytest.raises(ProfileError) as e:
            load_text(text, "p.yaml")
        elapsed = time.process_time() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert any(expected in str(p) for p in e.value.problems), str(e.value)
    assert "\n" not in "".join(str(p) for p in e.value.problems)
    # generous bounds (tracemalloc slows things ~3x); the bomb used 16 s of CPU and 3 GB
    assert elapsed < 3.0, elapsed
    assert peak < 60 * 2**20 + 30 * len(text), peak


def test_a_few_aliases_still_work() -> None:
    data, _ = compose("sel: &binds {verbs: [create]}\na: *binds\nb: *binds\n", "p.yaml")
    assert data["a"] == data["b"] == {"verbs": ["create"]}


@pytest.mark.parametrize(
    ("limits", "text", "expected"),
    [
        (Limits(max_aliases=0), "a: &x 1\nb: *x\n", "p.yaml:2:4: refused: more than 0 aliases"),
        (Limits(max_depth=2), "a: {b: {c: 1}}\n", "p.yaml:1:8: refused: nested more than 2 levels deep"),
        (Limits(max_nodes=3), "a: [1, 2]\n", "p.yaml:1:5: refused: more than 3 values"),
        (Limits(max_bytes=4), "a: 1\n", "p.yaml: 5 bytes is too large (at most 4)"),
        (Limits(max_int_digits=2), "a: 123\n", "p.yaml:1:4: a: integer longer than 2 digits"),
    ],
    ids=["aliases", "depth", "nodes", "bytes", "int-digits"],
)
def test_each_limit_names_itself(limits: Limits, text: str, expected: str) -> None:
    with pytest.raises(ProfileError) as e:
        compose(text, "p.yaml", limits)
    assert str(e.value) == expected
