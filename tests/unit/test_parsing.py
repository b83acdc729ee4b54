"""Uploads parsed in a child process: same answers as in-process, overruns refused, child replaced."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from kube_fault_proxy.proxy.control.parsing import ProcessParser, ThreadParser
from kube_fault_proxy.proxy.profiles.loader import ProfileError, load_text

GOOD = "apiVersion: kube-fault-proxy/v1\nkind: FaultProfile\nmetadata: {name: g}\nspec: {seed: 3}\n"
BAD = GOOD.replace("seed: 3", "seed: -1, colour: red")


@pytest.fixture(scope="module")
def child() -> Iterator[ProcessParser]:
    parser = ProcessParser()
    yield parser
    parser.close()


@pytest.mark.parametrize("kind", ["process", "thread"])
def test_a_parser_answers_like_the_loader(child: ProcessParser, kind: str) -> None:
    parser = child if kind == "process" else ThreadParser()
    assert asyncio.run(parser.parse(GOOD, "u")) == load_text(GOOD, "u")
    with pytest.raises(ProfileError) as got:
        asyncio.run(parser.parse(BAD, "u"))
    with pytest.raises(ProfileError) as expected:
        load_text(BAD, "u")
    assert str(got.value) == str(expected.value) and got.value.problems == expected.value.problems


def test_an_overrun_is_refused_and_the_child_replaced() -> None:
    parser = ProcessParser(timeout=0.001)  # not even time to start the child
    try:
        with pytest.raises(ProfileError, match=r"^u: refused: reading it took longer than 0.001s$"):
            asyncio.run(parser.parse(GOOD, "u"))
        parser.timeout = 60
        assert asyncio.run(parser.parse(GOOD, "u")).name == "g"
    finally:
        parser.close()
