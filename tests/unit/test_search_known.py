"""Known findings as data: the shipped catalogue, a hit of a known bug labelled and never shrunk, a break that is
the fault's own effect (a dropped ADDED) classified from the journal, and the budget shares (fake trials)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kube_fault_proxy.proxy.profiles.problems import ProfileError
from kube_fault_proxy.rig.invariants.ledger import Effect, Ledger, Touched
from kube_fault_proxy.rig.search import engine, known
from kube_fault_proxy.rig.search.engine import Search
from kube_fault_proxy.rig.search.excused import judge_trial
from kube_fault_proxy.rig.search.findings import Finding, kinds_on_matches
from kube_fault_proxy.rig.search.genome import Genome
from kube_fault_proxy.rig.search.outcome import Settings
from kube_fault_proxy.rig.search.output import write
from kube_fault_proxy.rig.search.trial import SEARCH, Tier, TrialResult
from kube_fault_proxy.rig.search.waist import BINDING

WATCH = {"verbs": ["watch"], "resources": ["pods"]}


def rule(kind: str, match: dict[str, Any]) -> dict[str, Any]:
    return {"name": f"r-{kind.lower()}", "match": match, "when": {"maxInjections": 1}, "fault": {kind: {}}}


def test_the_shipped_catalogue_holds_the_known_bugs_with_their_references() -> None:
    ids = {k.id: k for k in known.shipped().known}
    assert {"YUNIKORN-3355", "YUNIKORN-3128", "bind-committed-without-an-answer", "restart-assumes-recovered-pods",
            "kubernetes-100140"} <= set(ids)
    assert all(k.upstream for k in ids.values())
    root = Path(__file__).resolve().parents[2]
    assert all((root / k.report).is_file() for k in ids.values() if k.report), [k.report for k in ids.values()]
    phantom = ids["YUNIKORN-3355"]
    assert phantom.applies_to("yunikorn", "yunikorn v1.9.0")
    assert not phantom.applies_to("yunikorn", "yunikorn v1.9.0+3355-forget-pod-reverts-with-expiry-0123456789ab")
    assert not phantom.applies_to("yunikorn", "yunikorn src+yunikorn-k8shim-0123")  # master: new ground
    reset = Genome(rules=(rule("reset", BINDING),))
    assert phantom.matches(["I1", "I2", "stranded"], reset) and not phantom.matches(["I3", "stranded"], reset)
    assert known.shipped().match(["I3", "stranded"], reset, "yunikorn", "yunikorn v1.9.0") is ids["YUNIKORN-3128"]


def test_a_confirmed_hit_is_known_by_either_run_when_the_other_took_the_other_face_of_the_race() -> None:
    """YUNIKORN-3355 under a reset pair on Bindings: the first run booked phantoms (I1, I2), the replay left the
    pods ignored (I3), as YuniKorn's relist fell; what both broke (I4, stranded) matches no entry by itself."""
    shipped = known.shipped()
    only_3355 = known.Catalogue(known=[k for k in shipped.known if k.id != "YUNIKORN-3128"])  # 3128 as new ground
    resets = Genome(rules=(rule("resetUpstream", BINDING),))
    first, replay, both = ["I1", "I2", "I4", "stranded"], ["I3", "I4", "stranded"], ["I4", "stranded"]
    assert only_3355.match(both, resets, "yunikorn", "yunikorn v1.9.0") is None
    hit = only_3355.match_confirmed(both, first, replay, resets, "yunikorn", "yunikorn v1.9.0")
    assert hit is not None and hit.id == "YUNIKORN-3355"
    # The other way round (CI's run at 3481ecc): the first run left the pods ignored, the replay booked phantoms.
    hit = only_3355.match_confirmed(both, replay, first, resets, "yunikorn", "yunikorn v1.9.0")
    assert hit is not None and hit.id == "YUNIKORN-3355"
    assert only_3355.match_confirmed(both, [*replay, "no-overcommit"], first, resets, "yunikorn",
                                     "yunikorn v1.9.0") is None
    # A replay outside the entry's signature (here a broken placement) is not that bug's other face: a finding.
    assert only_3355.match_confirmed(both, first, [*replay, "no-overcommit"], resets, "yunikorn",
                                     "yunikorn v1.9.0") is None
    # Nor is a first run that matches nothing.
    assert only_3355.match_confirmed(both, both, replay, resets, "yunikorn", "yunikorn v1.9.0") is None


def test_a_catalogue_error_names_file_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "mine.yaml"
    bad.write_text("known:\n  - id: X\n    title: t\n    scheduler: yunikorn\n    builds: ['*']\n"
                   "    signature:\n      breaks: [no-such-invariant]\n      provokedBy: ['* on binding']\n"
                   "    upstream: unreported\n")
    with pytest.raises(ProfileError) as e:
        known.load(bad)
    assert f"{bad}:7:" in str(e.value) and "known[0].signature.breaks" in str(e.value)
    assert "unknown invariant 'no-such-invariant'" in str(e.value)


# --- the engine: known hits counted, not shrunk


def settings(tmp_path: Path, **more: Any) -> Settings:
    return Settings(**{"scheduler": "yunikorn", "control": "kube-scheduler", "budget": 3600, "seed": 3,
                       "kinds": ("abort", "dropEvents"), "out": tmp_path, "state_dir": tmp_path,
                       "profiles_dir": tmp_path, "pods": 40, "shrink_budget": 30, "replays": 2, "canary_every": 0,
                       "max_trials": 24, **more})


class Trials:
    """abort on a Binding breaks YUNIKORN-3128's signature; a dropEvents on the pod watch strands a pod by dropping
    its ADDED (the journal says so); kube-scheduler (the control) is clean."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ran: list[str] = []
        self.shrunk: list[int] = []
        monkeypatch.setattr(engine, "run_trial", self.run_trial)
        monkeypatch.setattr(Search, "rig", self.rig)
        original = Search.minimise

        def minimise(s: Search, found: Finding) -> None:
            self.shrunk.append(found.first.trial)
            original(s, found)

        monkeypatch.setattr(Search, "minimise", minimise)

    @staticmethod
    def rig(search: Search, scheduler: str) -> Any:
        search.builds[scheduler] = {"yunikorn": "yunikorn v1.9.0", "kube-scheduler": "kube-scheduler v1.36.3"}[
            scheduler]
        return SimpleNamespace(scheduler=scheduler, cluster=SimpleNamespace(processes={}))

    def run_trial(self, rig: Any, genome: Genome, name: str, tier: Tier = SEARCH, note: Any = None) -> TrialResult:
        self.ran.append(name)
        matches = kinds_on_matches(genome)
        result = TrialResult(name, rig.scheduler, genome, injections=3 if genome.rules else 0, seconds=2.0)
        if rig.scheduler == "kube-scheduler":
            return result
        if "abort on binding" in matches:
            result.broken = ["I3", "stranded"]
        elif any(m.startswith("dropEvents on ") for m in matches):
            result.broken = ["stranded"]
            dropped = Effect("event-dropped", 1.0, 1, "dropEvents", "r", "ADDED", Touched("pods", "ns", "load-1"))
            result.own_effect, _ = judge_trial({"violations": [{"invariant": "stranded", "objects": ["ns/load-1"]}]},
                                               Ledger((dropped,)), genome.action)
        return result


def test_a_known_bug_is_confirmed_once_then_counted_never_shrunk(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    trials = Trials(monkeypatch)
    out = Search(settings(tmp_path), lambda _: None, checkpoint=lambda o: write(o, ["search"])).run()
    tally = out.known["YUNIKORN-3128"]
    assert len(tally.trials) >= 2 and tally.confirmed_at == tally.trials[0]
    replayed = [n for n in trials.ran if n.endswith("-replay") and int(n[1:].split("-")[0]) in tally.trials]
    assert replayed == [f"t{tally.confirmed_at}-replay"]
    assert not set(trials.shrunk) & set(tally.trials) and not [f for f in out.findings if "I3" in f.target]
    assert all(h.known == "YUNIKORN-3128" for h in out.hits if h.verdict == "known")
    report = (tmp_path / "report.md").read_text()
    assert "**known: YUNIKORN-3128**" in report and f"{len(tally.trials)} hits (trials" in report
    shares = json.loads((tmp_path / "search.json").read_text())["budgetShares"]
    assert shares["known"]["trials"] == len(tally.trials)
    assert sum(v["trials"] for v in shares.values()) == len(out.trials)


def test_a_dropped_added_is_the_faults_effect_and_never_confirmed(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    trials = Trials(monkeypatch)
    out = Search(settings(tmp_path), lambda _: None, checkpoint=lambda o: write(o, ["search"])).run()
    effects = [h for h in out.hits if h.verdict == "excused"]
    assert effects and all("dropped the ADDED watch event of ns/load-1" in (h.known or "") for h in effects)
    assert not {f"t{h.trial}-replay" for h in effects} & set(trials.ran)
    assert not {h.trial for h in effects} & {h.trial for f in out.findings for h in f.hits}
    report = (tmp_path / "report.md").read_text()
    assert "the fault's own effect, not a bug (the ledger excuses it)" in report
    precision = json.loads((tmp_path / "search.json").read_text())["precision"]
    assert precision["hits"] == len(out.hits) and precision["excusedByLedger"] == len(effects)
    assert precision["hits"] == sum(precision[k] for k in ("excusedByLedger", "faultsEffect", "didNotRepeat",
                                                           "noInjection", "known", "confirmed", "unconfirmed"))
    assert precision["controlRunsPerHit"] == 3  # --controls' default
    assert f"- {len(out.hits)} hits: **{len(effects)} excused by the ledger**" in report
    assert "up to 3 control runs (kube-scheduler) per hit that repeated and per minimal case" in report


def test_include_known_confirms_and_shrinks_them_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trials = Trials(monkeypatch)
    out = Search(settings(tmp_path, include_known=True, shrink_total=None), lambda _: None).run()
    assert not out.known and trials.shrunk
    assert {tuple(f.target) for f in out.findings} == {("I3", "stranded"), ("stranded",)}


def test_one_known_bug_searched_as_new_ground_is_shrunk_and_keeps_its_name(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    trials = Trials(monkeypatch)
    out = Search(settings(tmp_path, known_as_new=("YUNIKORN-3128",), shrink_total=None), lambda _: None).run()
    assert "YUNIKORN-3128" not in out.known and trials.shrunk
    strand = next(f for f in out.findings if f.target == ["I3", "stranded"])
    assert strand.known == "YUNIKORN-3128" and strand.shrunk is not None
    assert "(known: YUNIKORN-3128)" in write(out, ["search"]).read_text()


def test_a_later_hit_known_only_by_its_replay_is_counted_and_the_first_confirmation_stays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """YUNIKORN-3355's two faces under resets on Bindings (3128 searched as new ground): the first hit books
    phantoms; the second leaves the pods ignored and only its replay books them, so it is replayed to be known,
    and counted; the bug stays confirmed at the first hit (the 2026-12-04 short search logged it twice)."""
    trials = Trials(monkeypatch)
    hits: list[str] = []
    phantom, ignored = ["I1", "I2", "I4", "stranded"], ["I3", "I4", "stranded"]

    def run_trial(rig: Any, genome: Genome, name: str, tier: Tier = SEARCH, note: Any = None) -> TrialResult:
        trials.ran.append(name)
        result = TrialResult(name, rig.scheduler, genome, injections=3 if genome.rules else 0, seconds=2.0)
        if rig.scheduler == "yunikorn" and "resetUpstream on binding" in kinds_on_matches(genome):
            hits.append(name)
            second = sum(1 for n in hits if not n.endswith("-replay")) == 2
            result.broken = (ignored if not name.endswith("-replay") else phantom) if second else phantom
        return result

    monkeypatch.setattr(engine, "run_trial", run_trial)
    out = Search(settings(tmp_path, kinds=("resetUpstream",), known_as_new=("YUNIKORN-3128",)),
                 lambda _: None).run()
    tally = out.known["YUNIKORN-3355"]
    first_hits = [n for n in hits if not n.endswith("-replay")]
    assert len(first_hits) >= 3, hits
    second = int(first_hits[1][1:])
    assert tally.confirmed_at == tally.trials[0] == int(first_hits[0][1:]) and second in tally.trials
    assert f"t{second}-replay" in trials.ran and not out.findings
