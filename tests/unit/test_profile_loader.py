"""Strict profile loading: every error names file:line:col and the field path."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kube_fault_proxy.proxy.profiles.library import load_dir
from kube_fault_proxy.proxy.profiles.loader import LIMITS, ProfileError, load_file, load_text, to_yaml
from kube_fault_proxy.proxy.profiles.profile import FaultProfile
from kube_fault_proxy.proxy.schema.strict import format_duration, parse_duration

ROOT = Path(__file__).resolve().parents[2]
HEADER = "apiVersion: kube-fault-proxy/v1\nkind: FaultProfile\nmetadata: {name: p}\n"


def problems(text: str) -> list[str]:
    with pytest.raises(ProfileError) as e:
        load_text(text, "p.yaml")
    return [str(p) for p in e.value.problems]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("spec:\n  rules:\n    - name: r\n      fault: {abort: {status: 500}}\n      colour: red\n",
         "p.yaml:8:7: spec.rules[0].colour: unknown field"),
        ("spec:\n  rules:\n    - name: r\n      fault: {abort: {status: 700}}\n",
         "p.yaml:7:31: spec.rules[0].fault.abort.status: Input should be less than or equal to 599"),
        ("spec:\n  rules:\n    - name: r\n      fault: {abort: {status: 500}, delay: {seconds: 1}}\n",
         "p.yaml:7:14: spec.rules[0].fault: a fault needs exactly one kind of: abort, throttle, "
         "delay, hang, reset, commitThenFail, expire, cut, dropEvents, duplicateEvents, outage, "
         "resetUpstream, staleList, coalesceEvents, crashPoint, delayEvents, failThenCommit, holdEvents, twoViews, watchList, stallStream, stallConnection (got abort, delay)"),
        ("spec:\n  rules:\n    - name: r\n      fault: {}\n",
         "p.yaml:7:14: spec.rules[0].fault: a fault needs exactly one kind of: abort, throttle, "
         "delay, hang, reset, commitThenFail, expire, cut, dropEvents, duplicateEvents, outage, "
         "resetUpstream, staleList, coalesceEvents, crashPoint, delayEvents, failThenCommit, holdEvents, twoViews, watchList, stallStream, stallConnection"),
        ("spec:\n  rules:\n    - fault: {reset: {}}\n",
         "p.yaml:6:7: spec.rules[0].name: required field is missing"),
        ("spec:\n  rules:\n    - name: r\n      when: {after: 10}\n      fault: {reset: {}}\n",
         "p.yaml:7:21: spec.rules[0].when.after: a duration needs a unit, like '10s' or '250ms' (got 10)"),
        ("spec:\n  rules:\n    - name: r\n      when: {for: 10 s}\n      fault: {reset: {}}\n",
         "p.yaml:7:19: spec.rules[0].when.for: not a duration: '10 s' (use e.g. '10s', '1m30s', '250ms')"),
        ("spec:\n  rules:\n    - name: r\n      probability: '0.5'\n      fault: {reset: {}}\n",
         "p.yaml:7:20: spec.rules[0].probability: Input should be a valid number"),
        ("spec:\n  rules:\n    - name: r\n      match: {verbs: [bind]}\n      fault: {reset: {}}\n",
         "p.yaml:7:23: spec.rules[0].match.verbs[0]: Input should be 'get', 'list', 'watch', "
         "'create', 'update', 'patch', 'delete', 'deletecollection', 'proxy', 'post', 'put', "
         "'head' or 'options'"),
        ("spec:\n  rules:\n    - name: r\n      fault: {reset: {}}\n    - name: r\n      fault: {reset: {}}\n",
         "p.yaml:5:3: spec: rule name 'r' is used twice"),
        ("spec:\n  rules:\n    - name: r\n      fault: {commitThenFail: {}}\n",
         "p.yaml:7:31: spec.rules[0].fault.commitThenFail: commitThenFail needs exactly one of "
         "abort, reset, hang"),
        ("spec:\n  rules:\n    - name: r\n      fault: {throttle: {retryAfterSeconds: 60}}\n",
         "p.yaml:7:45: spec.rules[0].fault.throttle.retryAfterSeconds: Input should be less than "
         "or equal to 32"),
        ("spec:\n  rules:\n    - name: r\n      when: {trigger: {match: {verbs: [create]}}}\n"
         "      fault: {reset: {}}\n",
         "p.yaml:7:23: spec.rules[0].when.trigger.count: required field is missing"),
        ("spec:\n  seed: -1\n", "p.yaml:5:9: spec.seed: Input should be greater than or equal to 0"),
    ],
    ids=["unknown-key", "out-of-range", "two-kinds", "no-kind", "missing-name", "unitless-duration",
         "bad-duration", "string-for-number", "bad-verb", "duplicate-rule", "commit-then-fail-empty",
         "apf-retry-after-bound", "trigger-count-missing", "negative-seed"],
)
def test_errors_name_position_and_path(spec: str, expected: str) -> None:
    assert expected in problems(HEADER + spec)


def test_every_problem_is_reported_at_once() -> None:
    found = problems(HEADER + "spec:\n  rules:\n    - name: r\n      probability: 2\n"
                     "      fault: {abort: {status: 99}}\n      extra: 1\n")
    assert len(found) == 3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "p.yaml: empty document"),
        ("a: [1, 2\n", "p.yaml:2:1: not valid YAML"),
        ("- 1\n- 2\n", "p.yaml:1:1: a profile must be a mapping"),
        (HEADER + "metadata: {name: q}\nspec: {}\n", "p.yaml:4:1: metadata: duplicate key"),
        ("apiVersion: v1\nkind: FaultProfile\nmetadata: {name: p}\nspec: {}\n",
         "p.yaml:1:13: apiVersion: Input should be 'kube-fault-proxy/v1'"),
        ("apiVersion: kube-fault-proxy/v1\nkind: FaultProfile\nmetadata: {name: Bad_Name}\nspec: {}\n",
         "p.yaml:3:18: metadata.name: String should match pattern"),
        ("apiVersion: kube-fault-proxy/v1\nkind: FaultProfile\nmetadata: {name: p}\n",
         "p.yaml:1:1: spec: required field is missing"),
        ("a: 1\n---\nb: 2\n", "p.yaml:2:1: not valid YAML: but found another document"),
    ],
    ids=["empty", "bad-yaml", "not-a-mapping", "duplicate-key", "wrong-api-version", "bad-name",
         "missing-spec", "two-documents"],
)
def test_document_level_errors(text: str, expected: str) -> None:
    assert any(p.startswith(expected) for p in problems(text)), problems(text)


def test_json_is_accepted_with_positions() -> None:
    text = ('{"apiVersion": "kube-fault-proxy/v1", "kind": "FaultProfile", "metadata": {"name": "j"},\n'
            ' "spec": {"rules": [{"name": "r", "fault": {"abort": {"status": 1}}}]}}')
    assert problems(text) == [
        "p.yaml:2:65: spec.rules[0].fault.abort.status: Input should be greater than or equal to 400"
    ]


def test_durations_are_parsed_once_and_round_trip() -> None:
    p = load_text(HEADER + "spec:\n  rules:\n    - name: r\n      when: {after: 1m30s, for: 250ms}\n"
                  "      fault: {delay: {seconds: 1.5, phase: response}}\n")
    assert p.spec.rules[0].when.after == 90.0
    assert p.spec.rules[0].when.for_ == 0.25
    again = load_text(to_yaml(p))
    assert again == p


def test_shipped_profiles_are_valid_and_documented() -> None:
    entries = load_dir(ROOT / "fault_profiles")
    assert "pass-through" in entries
    assert len(entries) >= 7
    for name, entry in entries.items():
        assert entry.profile.metadata.description.strip(), f"{name} has no description"
        assert load_text(to_yaml(entry.profile)) == entry.profile


def test_load_dir_refuses_duplicate_names(tmp_path: Path) -> None:
    for f in ("a.yaml", "b.yaml"):
        (tmp_path / f).write_text(HEADER + "spec: {}\n")
    with pytest.raises(ProfileError, match="also defined in"):
        load_dir(tmp_path)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot read"):
        load_file(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        ("{cut: {}}", "spec.rules[0].fault.cut: cut needs exactly one of afterEvents, afterSeconds"),
        ("{cut: {afterEvents: 1, afterSeconds: 2}}", "cut needs exactly one of afterEvents, afterSeconds"),
        ("{cut: {afterSeconds: 5, error: fatal}}", "spec.rules[0].fault.cut.error: Input should be 'none', 'expired' or 'internal'"),
        ("{dropEvents: {events: {types: [UPDATED]}}}", "spec.rules[0].fault.dropEvents.events.types[0]: Input should be"),
        ("{dropEvents: {probability: 2}}", "spec.rules[0].fault.dropEvents.probability: Input should be less than or equal to 1"),
        ("{outage: {}}", "spec.rules[0].fault.outage.seconds: required field is missing"),
        ("{outage: {seconds: 5, refuse: drop}}", "spec.rules[0].fault.outage.refuse: Input should be 'close', 'refuse' or 'blackhole'"),
        ("{expire: {form: xml}}", "spec.rules[0].fault.expire.form: Input should be 'auto', 'event' or 'status'"),
        ("{resetUpstream: {now: true}}", "spec.rules[0].fault.resetUpstream.now: unknown field"),
    ],
)
def test_watch_and_connection_fault_fields(fault: str, expected: str) -> None:
    found = problems(HEADER + f"spec:\n  rules:\n    - name: r\n      fault: {fault}\n")
    assert any(expected in p for p in found), found


def test_an_oversized_file_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (LIMITS.max_bytes + 1))
    with pytest.raises(ProfileError) as e:
        load_file(big)
    assert str(e.value) == f"{big}: 262,145 bytes is too large (at most 262,144)"


# --- property: any text is either a profile or a ProfileError, never another exception ---------

SHIPPED = sorted((ROOT / "fault_profiles").glob("*.yaml"))
YAML_PIECES = ["\n", " ", "  ", "- ", ": ", "? ", ",", "[", "]", "{", "}", "&a ", "*a", "&b ", "*b", "!!", "!x ",
               "'", '"', "|", ">", "#", "%", "@", "`", "<<: ", "---", "...", "\\", "\t", "\x00", "\x85", "\ufeff",
               "~", "null", "true", "0x1F", "1e999", ".nan", "-.inf", "0o17", "1:30", "2001-02-30", "9" * 80,
               "apiVersion", "kube-fault-proxy/v1", "kind", "FaultProfile", "metadata", "name", "spec", "rules",
               "fault", "abort", "status", "seed", "when", "after", "10s", "match", "verbs", "create", "probability"]
settings_fuzz = settings(max_examples=300, deadline=None, database=None,
                         suppress_health_check=[HealthCheck.too_slow])


def _loads_or_refuses(text: str) -> None:
    try:
        profile = load_text(text, "fuzz.yaml")
    except ProfileError as e:
        assert e.problems, "a ProfileError names at least one problem"
        assert all("\n" not in str(p) for p in e.problems)
    else:
        assert isinstance(profile, FaultProfile)


@settings_fuzz
@given(st.text())
def test_any_text_loads_or_is_refused(text: str) -> None:
    _loads_or_refuses(text)


@settings_fuzz
@given(st.lists(st.sampled_from(YAML_PIECES) | st.text(max_size=3), max_size=60).map("".join))
def test_yaml_shaped_text_loads_or_is_refused(text: str) -> None:
    _loads_or_refuses(text)


@settings_fuzz
@given(st.sampled_from(SHIPPED), st.data())
def test_mutated_shipped_profiles_load_or_are_refused(path: Path, data: st.DataObject) -> None:
    text = path.read_text()
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        cut = data.draw(st.integers(0, 8))
        text = text[:at] + data.draw(st.sampled_from(YAML_PIECES) | st.text(max_size=4)) + text[at + cut:]
    _loads_or_refuses(text)


@pytest.mark.parametrize("seconds", [10.0, 0.25, 90.0, 1e-05, 1234567.891, 5.18002e43, 0.1 + 0.2])
def test_a_duration_is_written_so_it_reads_back_the_same(seconds: float) -> None:
    text = format_duration(seconds)
    assert parse_duration(text) == seconds and "e" not in text
