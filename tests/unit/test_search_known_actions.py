"""Known findings that name trial actions (node and pod churn) beside fault kinds: the grammar, its strict errors,
matching, the reports, the shipped entries for YUNIKORN-3374 and the node flap's under-booking re-judging the
recorded YuniKorn actions search."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kube_fault_proxy.proxy.profiles.problems import ProfileError
from kube_fault_proxy.rig.actions import trial_churn
from kube_fault_proxy.rig.search import known, rejudge, rejudged_report
from kube_fault_proxy.rig.search.genome import Genome
from kube_fault_proxy.rig.search.outcome import KnownTally, Outcome, Settings
from kube_fault_proxy.rig.search.output import trial_lines
from kube_fault_proxy.rig.search.report_known import known_lines
from kube_fault_proxy.rig.search.trial import TrialResult
from kube_fault_proxy.rig.search.waist import BINDING

ROOT = Path(__file__).resolve().parents[2]
CAMPAIGN = ROOT / "docs/records/campaign-2026-12-06-yunikorn-actions/search.json"
NEW = ("YUNIKORN-3374", "node-flap-under-books-queue")
FLAP = {"do": "flapNode", "node": 52, "downSeconds": 0.5, "afterBindAnswers": 20}
DELETE = {"do": "deleteNode", "node": 3, "afterBinds": 5}
OUTAGE = {"name": "r1-outage-binding", "match": BINDING, "when": {"maxInjections": 1},
          "fault": {"outage": {"seconds": 1.0, "refuse": "refuse"}}}
THROTTLE = {"name": "r1-throttle-pod-list", "match": {"verbs": ["list"], "resources": ["pods"]},
            "when": {"maxInjections": 1}, "fault": {"throttle": {}}}


def catalogue(tmp_path: Path, signature: str) -> known.Catalogue:
    path = tmp_path / "mine.yaml"
    path.write_text("known:\n  - id: X\n    title: t\n    scheduler: yunikorn\n    builds: ['yunikorn *']\n"
                    f"    signature:\n      breaks: [I2]\n{signature}    upstream: unreported\n")
    return known.load(path)


def genome(*churn: dict[str, Any], rules: tuple[dict[str, Any], ...] = (OUTAGE,)) -> Genome:
    return Genome(rules=rules, pods=50, churn=churn)


# --- the grammar -------------------------------------------------------------------------------------------------

def test_an_entry_naming_actions_matches_a_trial_with_one_of_them_and_its_faults(tmp_path: Path) -> None:
    both = catalogue(tmp_path, "      provokedBy: ['outage on *']\n      actions: [flapNode]\n")
    assert both.match(["I2"], genome(FLAP), "yunikorn", "yunikorn v1.9.0") is not None
    assert both.match(["I2"], genome(), "yunikorn", "yunikorn v1.9.0") is None  # no action
    assert both.match(["I2"], genome(DELETE), "yunikorn", "yunikorn v1.9.0") is None  # another action
    assert both.match(["I2"], genome(DELETE, FLAP), "yunikorn", "yunikorn v1.9.0") is not None  # one of them
    assert both.match(["I2"], genome(FLAP, rules=(THROTTLE,)), "yunikorn", "yunikorn v1.9.0") is None  # its faults
    pattern = catalogue(tmp_path, "      provokedBy: ['outage on *']\n      actions: ['*Node']\n")
    assert pattern.match(["I2"], genome(DELETE), "yunikorn", "yunikorn v1.9.0") is not None
    assert pattern.match(["I2"], genome({"do": "deletePod", "pick": 0, "afterBinds": 1}), "yunikorn",
                         "yunikorn v1.9.0") is None


def test_an_entry_naming_only_actions_matches_under_any_faults(tmp_path: Path) -> None:
    only = catalogue(tmp_path, "      actions: [flapNode]\n")
    assert only.known[0].signature.provoked_by is None
    for rules in ((OUTAGE,), (THROTTLE,), ()):
        assert only.match(["I2"], genome(FLAP, rules=rules), "yunikorn", "yunikorn v1.9.0") is not None
        assert only.match(["I2"], genome(rules=rules), "yunikorn", "yunikorn v1.9.0") is None
    assert only.known[0].signature.provocation() == "a trial action of `flapNode`, under any faults or none"
    faults = catalogue(tmp_path, "      provokedBy: ['outage on *']\n")  # an entry of before: actions not asked
    assert faults.match(["I2"], genome(FLAP), "yunikorn", "yunikorn v1.9.0") is not None
    assert faults.known[0].signature.provocation() == "`outage on *`"


@pytest.mark.parametrize(("signature", "where", "error"), [
    ("      provokedBy: ['outage on *']\n      actions: [flapNode, flipNode]\n", ":9:27:",
     "known[0].signature.actions[1]: unknown trial action 'flipNode' (one of deleteNode, flapNode, resizeNode, "
     "deletePod, cordonNode, or a shell pattern naming some)"),
    ("      actions: ['*Pods']\n", ":8:", "known[0].signature.actions[0]: unknown trial action '*Pods'"),
    ("      actions: []\n", ":8:", "known[0].signature.actions: List should have at least 1 item"),
    ("", ":7:", "known[0].signature: a signature needs `provokedBy` (fault kinds on matches), `actions` (trial "
                "actions) or both"),
])
def test_an_unknown_action_is_an_error_naming_file_line_and_field(tmp_path: Path, signature: str, where: str,
                                                                   error: str) -> None:
    with pytest.raises(ProfileError) as e:
        catalogue(tmp_path, signature)
    assert f"{tmp_path / 'mine.yaml'}{where}" in str(e.value) and error in str(e.value), str(e.value)


# --- the shipped entries and the recorded search -----------------------------------------------------------------

def test_the_shipped_catalogue_names_3374_and_the_flap_under_booking_with_their_evidence() -> None:
    ids = {k.id: k for k in known.shipped().known}
    phantom, under = ids["YUNIKORN-3374"], ids["node-flap-under-books-queue"]
    assert phantom.signature.actions == ["flapNode"] and under.signature.actions == ["flapNode"]
    assert under.signature.provoked_by is None  # no fault needed: the node-churn record's plain flap
    assert "YUNIKORN-3374" in phantom.upstream and "YUNIKORN-3375" in under.upstream
    assert phantom.report == "docs/records/search-yunikorn-actions-2026-12-06.md"
    assert under.report == "docs/records/node-churn-yunikorn-v1.9.0-2026-12-06.md"
    # The minimal case of the record's finding 1: one outage on Bindings, a flap after 20 Binding answers.
    minimal = Genome.from_doc(rejudge.load_doc(CAMPAIGN)[1]["minimal"], "<minimal>")
    broke = ["I1", "I2", "I3", "I4", "assumed-pod-rescheduled", "stranded"]  # each of its 3 replays
    assert known.shipped().match(broke, minimal, "yunikorn", "yunikorn v1.9.0") is phantom
    assert known.shipped().match(broke, minimal.with_(churn=()), "yunikorn", "yunikorn v1.9.0") is None
    assert known.shipped().match(["I1"], genome(FLAP, rules=(THROTTLE,)), "yunikorn", "yunikorn v1.9.0") is under
    assert not phantom.applies_to("yunikorn", "yunikorn src+yunikorn-k8shim-0123")  # a source build: new ground


def test_the_recorded_actions_search_re_judged_finds_its_two_groups_known() -> None:
    shipped = known.shipped()
    before = known.Catalogue(known=[k for k in shipped.known if k.id not in NEW])
    old = rejudge.read(CAMPAIGN, rejudge.Rules(before, controls=2))
    new = rejudge.read(CAMPAIGN, rejudge.Rules(shipped, controls=2))
    assert [g.verdict(old.hits) for g in old.groups] == ["pending: more control runs"] * 2
    assert [g.verdict(new.hits) for g in new.groups] == ["does not survive: known (YUNIKORN-3374)",
                                                         "does not survive: known (node-flap-under-books-queue)"]
    assert old.after()["known"] == 29 and new.after()["known"] == 34 and new.after()["confirmed"] == 0
    assert {h.trial: h.known for h in new.hits if h.known in NEW} == {
        1: "YUNIKORN-3374", 4: "YUNIKORN-3374", 6: "YUNIKORN-3374", 15: "YUNIKORN-3374",
        12: "node-flap-under-books-queue"}
    # The 29 hits known before keep their entries; the hit that injected nothing (t41, a flap) stays so.
    assert [(h.trial, h.known) for h in old.hits if h.after == "known"] == \
        [(h.trial, h.known) for h in new.hits if h.after == "known" and h.known not in NEW]
    assert next(h for h in new.hits if h.trial == 41).after == "no-injection"
    why = next(h for h in new.hits if h.trial == 1).why
    assert why.startswith("YUNIKORN-3374 (known-findings.yaml: provoked by `* on binding`, `outage on *`, "
                          "`resetUpstream on *` with a trial action of `flapNode`;")
    lines = rejudged_report.group_lines(new)
    assert lines[2].endswith("| 3/3 | does not survive: known (YUNIKORN-3374) |")


# --- the reports -------------------------------------------------------------------------------------------------

def test_the_reports_show_the_trial_actions_and_what_provokes_a_known_finding(tmp_path: Path) -> None:
    s = Settings(scheduler="yunikorn", control="kube-scheduler", budget=60, seed=1, kinds=("outage",), out=tmp_path,
                 state_dir=tmp_path, profiles_dir=tmp_path, actions=trial_churn.ACTIONS)
    flapped = TrialResult("t3", "yunikorn", genome(FLAP, DELETE), injections=1, seconds=2.0)
    plain = TrialResult("t4", "yunikorn", genome(), injections=1, seconds=2.0)
    entry = next(k for k in known.shipped().known if k.id == "YUNIKORN-3374")
    out = Outcome(s, trials=[flapped, plain])
    out.known["YUNIKORN-3374"] = KnownTally(entry, [3], 3)
    rows = trial_lines(out)
    assert any(r.startswith("| t3 | outage on binding; actions: deleteNode, flapNode | ") for r in rows), rows
    assert any(r.startswith("| t4 | outage on binding | ") for r in rows), rows
    line = next(li for li in known_lines(out) if "YUNIKORN-3374" in li)
    assert "provoked by `* on binding`, `outage on *`, `resetUpstream on *` with a trial action of `flapNode`; " \
           "upstream: https://issues.apache.org/jira/browse/YUNIKORN-3374" in line
