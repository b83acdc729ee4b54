"""Every fault kind has an example in the reference that the profile loader accepts, and a shipped profile."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kube_fault_proxy import shipped
from kube_fault_proxy.cli import reference
from kube_fault_proxy.cli.reference import examples, library
from kube_fault_proxy.proxy.faults import KINDS
from kube_fault_proxy.proxy.profiles.library import load_dir
from kube_fault_proxy.proxy.profiles.loader import load_text
from kube_fault_proxy.proxy.profiles.problems import ProfileError

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "fault-kinds.md"
YAML_BLOCK = re.compile(r"```yaml\n(.*?)```", re.S)


def _section(page: str, kind: str) -> str:
    return page.split(f"\n## {kind}\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("kind", [k.kind for k in KINDS])
def test_every_kind_has_an_example_the_loader_accepts(kind: str) -> None:
    """The example as the committed page shows it, loaded by the loader `serve` and `profiles validate` use."""
    [block] = YAML_BLOCK.findall(_section(PAGE.read_text(encoding="utf-8"), kind))
    profile = load_text(block, f"fault-kinds.md#{kind.lower()}")
    assert [rule.fault.spec.kind for rule in profile.spec.rules] == [kind]


def test_a_broken_example_would_be_refused() -> None:
    """The check above can fail: a setting out of bounds in an example is an error naming the field."""
    bad = examples.profile("delay").replace("seconds: 1.5", "seconds: -1")
    with pytest.raises(ProfileError, match=r"spec\.rules\[0\]\.fault\.delay\.seconds"):
        load_text(bad, "example")


def test_every_kind_has_an_example_and_no_example_is_for_an_unknown_kind() -> None:
    assert sorted(examples.RULES) == sorted(k.kind for k in KINDS)
    assert not [m for m in reference.undescribed() if "no example" in m]


def test_every_kind_has_a_shipped_profile() -> None:
    used = {rule.fault.spec.kind for entry in load_dir(shipped.PROFILES).values() for rule in entry.profile.spec.rules}
    assert [k.kind for k in KINDS if k.kind not in used] == []


def test_the_reference_names_the_shipped_profiles_of_each_kind() -> None:
    page = PAGE.read_text(encoding="utf-8")
    using = library.shipped_kinds()
    assert using["holdEvents"] == ["nodes-behind-pods"]
    for kind in KINDS:
        for name in using[kind.kind]:
            assert f"[`{name}`](shipped.md)" in _section(page, kind.kind).split("Shipped profiles that use it:")[1]
