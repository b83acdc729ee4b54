"""Strings read at a few paths of a JSON document, whatever else it holds and however deep."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kube_fault_proxy.proxy.requests.json_fields import JSONFields, NotJSON, _Reader

NAME = ("target", "name")
FIELDS = JSONFields([NAME, ("metadata", "name")])
DEEP_ARRAY = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"x":' * 100_000 + "0" + "}" * 100_000
CHAIN = "[0," * 50_000 + "0" + "]" * 50_000  # a sibling at every level: no run of brackets to take whole
T = '"target":{"kind":"Node","name":"n1"}'


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ('{"target":{"name":"n1"}}', {NAME: "n1"}),
        (f'{{{T},"x":{DEEP_ARRAY}}}', {NAME: "n1"}),
        (f'{{"x":{DEEP_ARRAY},{T}}}', {NAME: "n1"}),
        (f'{{"x":{DEEP_OBJECT},{T}}}', {NAME: "n1"}),
        (f'{{"x":{CHAIN},{T}}}', {NAME: "n1"}),
        (f'{{"target":{{"x":{DEEP_OBJECT},"name":"n1"}}}}', {NAME: "n1"}),
        (f'{{"metadata":{{"name":"p1","x":{DEEP_ARRAY}}},{T}}}', {NAME: "n1", ("metadata", "name"): "p1"}),
        ('{"\\u0074arget":{"n\\u0061me":"n\\u0031"}}', {NAME: "n1"}),
        ('{"x":{"target":{"name":"no"}},"y":[{"target":{"name":"no"}}]}', {}),
        ('{"x":"\\"target\\":{\\"name\\":\\"no\\"}"}', {}),
        ('{"target":{"name":"n1"},"target":{"name":"n2"}}', {NAME: "n2"}),
        ('{"target":{"name":"n1"},"target":{"kind":"Node"}}', {}),  # the last one wins, as in json.loads
        ('{"target":{"name":"n1","name":null}}', {}),
        ('{"target":{"name":NaN,"n":Infinity,"m":-Infinity}}', {}),  # json.loads' own literals
        ('{"target":{"name":7}}', {}),
        ('{"target":"n1"}', {}),
        (' \n{ "target" :\t{ "name" : "n1" } }\r\n', {NAME: "n1"}),
        ('["target",{"target":{"name":"n1"}}]', {}),
        ('"n1"', {}),
    ],
    ids=["plain", "deep-array-after", "deep-array-before", "deep-object", "deep-chain", "deep-inside-target",
         "deep-inside-metadata", "escaped-keys", "nested-elsewhere", "in-a-string", "repeated-last-wins",
         "repeated-last-object-wins", "repeated-null", "json-literals", "not-a-string", "target-a-string", "whitespace", "top-level-array", "top-level-string"],
)
def test_the_wanted_strings_are_read_whatever_else_is_there(text: str, values: dict[tuple[str, ...], str]) -> None:
    picked = FIELDS.pick(text)
    assert picked.values == values
    assert picked.too_deep == set()


@pytest.mark.parametrize(
    "text",
    ["", "not json", '{"target":{"name":"n1"}', '{"target":{"name":"n1"}}}', '{"a":1,}', "[1,]", "[1 2]", '{"a" 1}',
     '{"a":[}', "[01]", "[1.]", "[nan]", "[tru]", '["\x01"]', '["\\x"]', '{"target":{"name":"n1"}} x', "[\x0b1]",
     f'{{{T},"x":{DEEP_ARRAY[:-1]}}}', f'{{{T},"x":{DEEP_ARRAY}]}}', f'{{{T},"x":{CHAIN[:-1]}}}',
     f'{{"x":[{"[0]," * 1000}[0,]]}}'],
    ids=["empty", "garbage", "unclosed", "extra-closer", "trailing-comma-object", "trailing-comma-array",
         "missing-comma", "missing-colon", "mismatched", "leading-zero", "bare-dot", "nan", "bad-literal",
         "control-char", "bad-escape", "extra-data", "vertical-tab", "deep-unclosed", "deep-extra-closer",
         "chain-unclosed", "bad-element-in-a-run"],
)
def test_anything_but_one_json_value_is_refused(text: str) -> None:
    with pytest.raises(NotJSON):
        FIELDS.pick(text)


@pytest.mark.parametrize(
    ("text", "too_deep"),
    [
        (f'{{"target":{DEEP_ARRAY}}}', {("target",)}),
        (f'{{"target":{{"name":{DEEP_OBJECT}}}}}', {NAME}),
        (f'{{"target":[{"[" * 1001}{"]" * 1001}]}}', {("target",)}),
        (f'{{"target":{"[" * 1000}{"]" * 1000}}}', set()),
        (f'{{"x":{DEEP_ARRAY},"target":{{"x":{DEEP_ARRAY}}}}}', set()),
        (DEEP_ARRAY, {()}),
    ],
    ids=["target", "name", "just-over", "at-the-limit", "elsewhere", "top-level"],
)
def test_a_wanted_path_nested_past_the_limit_says_so(text: str, too_deep: set[tuple[str, ...]]) -> None:
    picked = FIELDS.pick(text)
    assert picked.values == {}
    assert picked.too_deep == too_deep


def test_a_repeated_key_forgets_how_deep_its_earlier_value_was() -> None:
    assert FIELDS.pick(f'{{"target":{DEEP_ARRAY},"target":{{"name":"n1"}}}}').too_deep == set()
    assert FIELDS.pick(f'{{"target":{{"name":"n1"}},"target":{DEEP_ARRAY}}}').values == {}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(["n1", "name", "target", 'a"b', "é\x01"]),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["target", "name", "metadata", "kind", "x"]), inner, max_size=4),
    max_leaves=40,
)


def _expected(doc: Any) -> dict[tuple[str, ...], str]:
    found = {}
    for path in (NAME, ("metadata", "name")):
        value = doc
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, str):
            found[path] = value
    return found


@settings(max_examples=300, derandomize=True, deadline=None)
@given(doc=JSON, indent=st.sampled_from([None, 1]), ascii_only=st.booleans())
def test_it_reads_what_the_standard_decoder_reads(doc: Any, indent: int | None, ascii_only: bool) -> None:
    text = json.dumps({"wrapped": [doc] * 2, "target": doc, "metadata": doc}, indent=indent, ensure_ascii=ascii_only)
    assert FIELDS.pick(text).values == _expected(json.loads(text))


MIB = 1 << 20
HOSTILE = {  # each 1 MiB, the most the proxy buffers, and at least 1,000 deep: out of the standard decoder's reach
    "deep-chain": '{"x":' + "[0," * (MIB // 3 - 20) + "0" + "]" * (MIB // 3 - 20) + f",{T}}}",
    "wide-deep-elements": '{"x":' + "[" * 1000 + ",".join(["[[[[[0]]]]]"] * (MIB // 12 - 200)) + "]" * 1000 + f",{T}}}",
    "many-members": "{" + '"a":[[[[[0]]]]],' * (MIB // 16 - 200) + '"x":' + DEEP_ARRAY[:2000] + DEEP_ARRAY[-2000:] + f",{T}}}",
}
SECONDS_PER_MIB = 3.0  # measured 0.3-0.65 s on a loaded 2-core machine: ~0.5 µs a token, 1 to 3 bytes a token


@pytest.mark.parametrize("name", list(HOSTILE))
def test_time_is_linear_in_the_text(name: str) -> None:
    started = time.perf_counter()
    assert FIELDS.pick(HOSTILE[name]).values == {NAME: "n1"}
    assert time.perf_counter() - started < SECONDS_PER_MIB


NEAR_JSON = st.lists(st.sampled_from(['{', '}', '[', ']', ',', ':', '"target"', '"name"', '"n1"', '"x"', '0', '-1.5e3',
                                      'true', 'null', 'NaN', '"\\u0074arget"', '"a\\"b"', ' ', '\n', '01', '"\x01"',
                                      '9' * 5000, '[' * 1200, ']' * 1200, '{"target":{"name":"n2"}}']),
                     max_size=14).map("".join)


@settings(max_examples=3000, derandomize=True, deadline=None)
@given(text=st.one_of(NEAR_JSON, NEAR_JSON.map(lambda t: '{"target":{"name":"n1"},"y":' + t + "}")))
def test_the_decoders_fast_answer_is_the_readers_answer(text: str) -> None:
    """pick() takes json.loads' answer when it can: on any text, valid or not, it answers as the token reader."""
    def outcome(pick: Any) -> Any:
        try:
            got = pick(text)
        except NotJSON:
            return "not JSON"
        return got.values, got.too_deep
    assert outcome(FIELDS.pick) == outcome(lambda t: _Reader(FIELDS).read(t))


def test_a_deep_value_on_the_way_is_still_too_deep_where_the_decoder_reads_it() -> None:
    """1,200 levels: within the decoder's reach (~1,500), past max_depth (1,000): the reader's answer."""
    deep = "[" * 1200 + "]" * 1200
    assert isinstance(json.loads(deep), list)  # the decoder reads it (RecursionError past ~1,500) ...
    picked = FIELDS.pick(f'{{"target":{deep}}}')
    assert picked.values == {} and picked.too_deep == {("target",)}  # ... and the reader still says so
