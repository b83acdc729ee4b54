"""The invariants by name: I1-I5 as aliases, every name self-explaining, lookups by either."""

from __future__ import annotations

import re

import pytest
from kube_fault_proxy.rig.invariants.catalogue import CATALOGUE, INVARIANTS, Violation, label, lookup


def test_every_invariant_has_a_kebab_case_name_and_a_one_line_meaning() -> None:
    for inv in CATALOGUE:
        assert re.fullmatch(r"[a-z]+(-[a-z]+)*", inv.name), inv.name
        assert inv.meaning and "\n" not in inv.meaning
    assert len({i.name for i in CATALOGUE}) == len({i.key for i in CATALOGUE}) == len(CATALOGUE)


def test_the_old_numbers_stay_as_aliases_and_keys() -> None:
    assert [i.alias for i in CATALOGUE if i.alias] == ["I1", "I2", "I3", "I4", "I5"]
    assert INVARIANTS["I2"].name == "no-phantom-allocation"
    assert "stranded" in INVARIANTS and "missing-node" in INVARIANTS


@pytest.mark.parametrize(
    ("word", "key", "shown"),
    [
        ("I2", "I2", "I2 no-phantom-allocation"),
        ("no-phantom-allocation", "I2", "I2 no-phantom-allocation"),
        ("I1", "I1", "I1 queue-books-bound-pods"),
        ("no-assumed-pod-left", "I5", "I5 no-assumed-pod-left"),
        ("stranded", "stranded", "stranded"),
        ("missing-node", "missing-node", "missing-node"),
    ],
)
def test_lookup_by_name_or_alias(word: str, key: str, shown: str) -> None:
    assert lookup(word).key == key
    assert label(key) == shown


def test_an_unknown_word_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown invariant 'I9' \(known: stranded, .*I2 no-phantom-allocation"):
        lookup("I9")
    assert label("some-other-report's") == "some-other-report's"  # shown as it is


def test_a_violation_carries_its_kind_as_data() -> None:
    assert Violation("I2", "m", ("ns/p",), "phantom").as_dict() == {
        "invariant": "I2", "message": "m", "objects": ["ns/p"], "kind": "phantom"}
    assert Violation("stranded", "m").as_dict() == {"invariant": "stranded", "message": "m", "objects": []}
