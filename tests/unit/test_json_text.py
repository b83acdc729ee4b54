"""JSON profile text rewritten where YAML would read it otherwise, and problems' columns given back."""

from __future__ import annotations

import json

import pytest
from kube_fault_proxy.proxy.control.json_text import as_yaml, restore
from kube_fault_proxy.proxy.profiles.loader import ProfileError, load_text
from kube_fault_proxy.proxy.profiles.yaml_reader import compose


@pytest.mark.parametrize(
    ("text", "yaml"),
    [
        ('{"a": "\\ud83d\\ude00"}', '{"a": "\\U0001f600"}'),
        ('{"a": "\\\\ud83d\\\\ude00"}', '{"a": "\\\\ud83d\\\\ude00"}'),  # escaped backslashes: not an escape
        ('{"a": 1e5, "b": 1.5E-7, "c": -2e+3}', '{"a": 1.0e+5, "b": 1.5e-7, "c": -2.0e+3}'),
        ('{"1e5": "1e5"}', '{"1e5": "1e5"}'),  # in a string it is text
        ('{"a": 1.5, "b": 10}', '{"a": 1.5, "b": 10}'),
    ],
    ids=["surrogate-pair", "escaped-backslash", "exponents", "in-strings", "nothing-to-do"],
)
def test_json_reads_the_same_as_yaml(text: str, yaml: str) -> None:
    rewritten, _ = as_yaml(text)
    assert rewritten == yaml
    assert compose(rewritten, "t")[0] == json.loads(text)


@pytest.mark.parametrize("indent", [None, 2])
def test_a_problem_is_reported_where_it_is_in_the_text_as_sent(indent: int | None) -> None:
    doc = {"apiVersion": "kube-fault-proxy/v1", "kind": "FaultProfile",
           "metadata": {"name": "x", "description": "😀 and 😀"},
           "spec": {"rules": [{"name": "r", "probability": 1e-5, "fault": {"abort": {"status": 9999}}}]}}
    text = json.dumps(doc, indent=indent).replace("1e-05", "1e-5")
    rewritten, shifts = as_yaml(text)
    with pytest.raises(ProfileError) as caught:
        load_text(rewritten, "t")
    [problem] = restore(caught.value, shifts).problems
    at = text.index("9999")
    assert (problem.line, problem.column) == (text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at))
    assert problem.path == "spec.rules[0].fault.abort.status"
