"""bench/mutation.py's bookkeeping: the manifest of planted bugs, when a search found one, what else it found,
the median over seeds, and the search command each run gets (a mutant on the release, or planted on a fixed
base and controlled by that base)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from kube_fault_proxy.proxy.profiles.problems import ProfileError

from tests.support.bench import load_bench

ROOT = Path(__file__).resolve().parents[2]


def bench() -> ModuleType:
    return load_bench("mutation")


def test_the_shipped_manifest_names_at_least_five_mutants_whose_patches_exist() -> None:
    mutants = bench().load()
    assert len(mutants) >= 5 and len({m.name for m in mutants}) == len(mutants)
    for m in mutants:
        patch = Path(m.patch)
        assert patch.is_file() and patch.is_absolute()
        head = patch.read_text().split("\n--- a/")[0]
        assert "What it breaks:" in head and "Why realistic:" in head and "Trigger:" in head, m.name
        assert m.breaks


@pytest.mark.parametrize("patch", sorted((ROOT / "bench" / "mutants").rglob("*.patch")), ids=lambda p: p.stem)
def test_every_planted_bug_says_what_it_breaks_why_it_is_realistic_and_what_triggers_it(patch: Path) -> None:
    head, _, diff = patch.read_text().partition("\n--- a/")
    assert head.startswith("Planted bug (mutation benchmark): ")
    assert all(f"\n{key}:" in head for key in ("What it breaks", "Why realistic", "Trigger"))
    assert "Expected invariant" in head and diff  # a unified diff follows the header


@pytest.mark.parametrize(("body", "said"), [
    ("mutants:\n  - name: a\n    target: yunikorn\n    patch: a.patch\n    breaks: [no-such-invariant]\n",
     "m.yaml:5:13: mutants[0].breaks: unknown invariant 'no-such-invariant'"),
    ("mutants:\n  - name: a\n    target: kube-controller-manager\n    patch: a.patch\n    breaks: [stranded]\n",
     "m.yaml:3:13: mutants[0].target: Input should be 'yunikorn' or 'kube-scheduler'"),
    ("mutants:\n  - name: a\n    target: yunikorn\n    patch: a.patch\n    breaks: []\n",
     "m.yaml:5:13: mutants[0].breaks: name at least one invariant"),
    ("mutants:\n  - name: a\n    target: yunikorn\n    patch: a.patch\n    breaks: [stranded]\n    color: red\n",
     "m.yaml:6:5: mutants[0].color: unknown field"),
    ("mutants:\n  - name: a\n    target: yunikorn\n    patch: gone.patch\n    breaks: [stranded]\n",
     "mutants[0].patch: "),
    ("mutants:\n  - {name: a, target: yunikorn, patch: a.patch, bases: {fix: gone.patch}, breaks: [stranded]}\n",
     "mutants[0].bases.fix: "),
    ("mutants:\n  - {name: a, target: yunikorn, patch: a.patch, breaks: [stranded]}\n"
     "  - {name: a, target: yunikorn, patch: a.patch, breaks: [stranded]}\n", "mutants[1].name: 'a' is given twice"),
])
def test_a_bad_manifest_is_refused_naming_file_line_and_field(tmp_path: Path, body: str, said: str) -> None:
    (tmp_path / "a.patch").write_text("x\n")
    (tmp_path / "m.yaml").write_text(body)
    with pytest.raises(ProfileError) as e:
        bench().load(tmp_path / "m.yaml")
    assert said in str(e.value)
    assert str(tmp_path / "m.yaml") in str(e.value)


def test_the_manifest_lists_the_kube_scheduler_mutants_searchable_now() -> None:
    by_name = {m.name: m for m in bench().load()}
    for name in ("bind-error-skips-requeue", "bind-error-keeps-assumed-pod"):
        m = by_name[name]
        assert m.target == "kube-scheduler" and Path(m.patch).parent.name == "kube-scheduler"
        head = Path(m.patch).read_text().split("\n--- a/")[0]
        assert "Against k8s.io/kubernetes v1.37.2." in head and "Not searchable yet" not in head
        assert set(m.breaks) & {"stranded", "no-pod-waits-past-bound"}
    a_ks_file = sorted((ROOT / "bench" / "mutants" / "kube-scheduler").glob("*.patch"))
    assert {Path(m.patch) for m in by_name.values() if m.target == "kube-scheduler"} == set(a_ks_file)  # all listed


def test_a_kube_scheduler_mutant_is_searched_with_its_own_patch_option_against_its_release() -> None:
    b = bench()
    m = next(m for m in b.load() if m.target == "kube-scheduler")
    opts = argparse.Namespace(controls=3, kinds="abort", budget="6m", nodes=10, pods=40, max_trials=None,
                              include_known=False, base_patch=None)
    argv = b.search_argv(m, "plan", 1, Path("/o"), Path("/s"), opts)
    assert argv[1:5] == ["search", "--scheduler", "kube-scheduler", "--kube-scheduler-patch"] and argv[5] == m.patch
    assert argv[argv.index("--control") + 1] == "build:released" and "--yunikorn-patch" not in argv
    assert "--shapes" not in argv  # the search's own shapes, unless asked
    tight = b.search_argv(m, "random", 1, Path("/o"), Path("/s"), argparse.Namespace(**{**vars(opts),
                                                                                      "shapes": "exact-fill"}))
    assert tight[tight.index("--shapes") + 1] == "exact-fill"
    assert "--actions" not in argv  # none, unless asked
    churn = b.search_argv(m, "plan", 1, Path("/o"), Path("/s"), argparse.Namespace(**{**vars(opts), "actions": "all"}))
    assert churn[churn.index("--actions") + 1] == "all" and churn[-1] == "--plan"


def test_a_base_patch_is_refused_for_a_kube_scheduler_mutant_before_any_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench().main(["run", "--mutants", "bind-error-keeps-assumed-pod", "--base-patch",
                         "3355-forget-pod-reverts-with-expiry", "--results", str(tmp_path / "r.json"),
                         "-o", str(tmp_path / "o")]) == 2
    assert ("--base-patch is a YuniKorn base; bind-error-keeps-assumed-pod patch kube-scheduler"
            in capsys.readouterr().err)
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "o").exists()


def test_chosen_mutants_and_an_unknown_name() -> None:
    b = bench()
    mutants = b.load()
    assert [m.name for m in b.chosen(mutants, f" {mutants[1].name} ")] == [mutants[1].name]
    assert b.chosen(mutants, None) == mutants
    assert b.chosen(mutants, f"{mutants[2].name},{mutants[0].name}") == [mutants[2], mutants[0]]  # in the order asked
    with pytest.raises(ValueError, match="no mutant nope"):
        b.chosen(mutants, f"{mutants[0].name},nope")


def hit(trial: int, broken: list[str], replay: list[str] | None, verdict: str) -> dict[str, Any]:
    return {"trial": trial, "broken": broken, "replay": replay, "verdict": verdict, "control": []}


SEARCH = {"trials": 12, "canaries": [{"name": "c9"}], "hits": [
    hit(2, ["no-phantom-allocation"], ["no-phantom-allocation"], "control-broken"),  # the released build too
    hit(4, ["no-assumed-pod-left", "stranded"], ["stranded"], "confirmed"),  # replayed only stranded: not it
    hit(7, ["no-assumed-pod-left"], ["no-assumed-pod-left"], "not-reproduced"),
    hit(9, ["no-assumed-pod-left", "shim-cache-agrees"], ["no-assumed-pod-left", "shim-cache-agrees"], "confirmed"),
    hit(11, ["no-assumed-pod-left"], ["no-assumed-pod-left"], "confirmed"),
    hit(12, ["stranded"], ["stranded"], "confirmed"),
    {**hit(13, ["no-phantom-allocation"], None, "known"), "known": "YUNIKORN-3355"}]}  # counted, not replayed


def test_found_at_the_first_confirmed_hit_whose_replay_breaks_a_planted_invariant_too() -> None:
    b = bench()
    first = b.first_find(SEARCH, ["no-assumed-pod-left"])
    assert first is not None and first["trial"] == 9
    assert b.first_find(SEARCH, ["queue-books-bound-pods"]) is None
    assert b.first_find({"hits": []}, ["stranded"]) is None
    # what is not the planted bug: the distinct invariant sets of other confirmed hits (stranded twice: once)
    assert b.other_findings(SEARCH, ["no-assumed-pod-left"]) == [["stranded"]]
    assert b.other_findings(SEARCH, ["stranded"]) == [["no-assumed-pod-left"], ["no-assumed-pod-left",
                                                                               "shim-cache-agrees"]]
    assert b.verdicts(SEARCH) == {"confirmed": 4, "control-broken": 1, "known": 1, "not-reproduced": 1}
    assert b.first_find(SEARCH, ["no-phantom-allocation"]) is None  # a known bug's hit that was not replayed


def test_a_planted_bug_the_search_files_under_a_known_signature_is_found_and_says_as_what() -> None:
    b = bench()
    known = {**hit(5, ["no-phantom-allocation"], ["no-phantom-allocation"], "known"), "known": "YUNIKORN-3355"}
    doc = {**SEARCH, "hits": [*SEARCH["hits"], known]}
    run = b.record(b.Run("m", "random", 1, "/x"), doc, ["no-phantom-allocation"], trial_runs=9)
    assert run.trials_to_find == 6 and run.found_as == "YUNIKORN-3355" and run.known == ["YUNIKORN-3355"]
    assert run.other_findings == [["no-assumed-pod-left"], ["no-assumed-pod-left", "shim-cache-agrees"],
                                  ["stranded"]]


def test_yunikorns_invariant_keys_count_as_their_names() -> None:
    b = bench()
    doc = {"hits": [hit(3, ["I5", "diverged"], ["no-assumed-pod-left", "diverged"], "confirmed")]}
    first = b.first_find(doc, ["no-assumed-pod-left"])
    assert first is not None and b.target(first) == ["diverged", "no-assumed-pod-left"]
    assert b.canonical("I1") == "queue-books-bound-pods" and b.canonical("diverged") == "diverged"


def test_what_the_control_broke_too_is_not_the_hits_and_finds_no_mutant() -> None:
    """2026-12-07: a confirmed hit whose target and replay broke I1-I5 while the released control broke all but I3:
    the hit is I3 (no-ignored-pod), so a mutant that breaks I1 or I2 was not found by it."""
    b = bench()
    confirmed = {**hit(1, ["I1", "I2", "I3", "I4", "I5", "stranded"], ["I1", "I2", "I3", "I4", "I5", "stranded"],
                       "confirmed"), "shared": ["I1", "I2", "I4", "I5", "stranded"]}
    doc = {"hits": [confirmed]}
    assert b.target(confirmed) == ["no-ignored-pod"]
    assert b.first_find(doc, ["queue-books-bound-pods", "no-phantom-allocation"]) is None
    assert b.other_findings(doc, ["queue-books-bound-pods", "no-phantom-allocation"]) == [["no-ignored-pod"]]


def test_rescore_recomputes_a_runs_figures_from_its_search_directory(tmp_path: Path) -> None:
    b = bench()
    (tmp_path / "search.json").write_text(json.dumps(SEARCH))
    (tmp_path / "trials.jsonl").write_text("{}\n" * 7)
    old = {"mutant": "m", "mode": "random", "seed": 1, "out": str(tmp_path), "trials_to_find": None,
           "seconds": 240.0, "exit": 0}
    new = b.rescore(old, ["no-assumed-pod-left"])
    assert new["trials_to_find"] == 10 and new["trial_runs"] == 7 and new["seconds"] == 240.0 and new["exit"] == 0
    assert b.rescore({**old, "base": "fix"}, ["no-assumed-pod-left"])["base"] == "fix"  # the base is kept
    assert b.rescore({**old, "out": str(tmp_path / "gone")}, ["stranded"]) == {**old, "out": str(tmp_path / "gone")}


def test_a_run_records_trials_to_find_counting_from_one_and_every_step() -> None:
    b = bench()
    run = b.record(b.Run("m", "random", 1, "/x"), SEARCH, ["no-assumed-pod-left"], trial_runs=30)
    assert run.trials_to_find == 10 and run.found_by == ["no-assumed-pod-left", "shim-cache-agrees"]
    assert run.steps == 13 and run.trial_runs == 30 and run.other_findings == [["stranded"]]
    missed = b.record(b.Run("m", "plan", 1, "/x"), SEARCH, ["queue-books-bound-pods"], trial_runs=30)
    assert missed.trials_to_find is None and missed.found_by is None and len(missed.other_findings) == 3


@pytest.mark.parametrize(("values", "median"), [
    ([3, 9, 5], 5.0), ([3, None, 5], 5.0), ([3, None, None], None), ([None], None), ([], None),
    ([4, 8], 6.0), ([4, None], None), ([2, 4, 6, None], 5.0)])
def test_the_median_over_seeds_counts_a_miss_as_worse_than_any_find(values: list[int | None],
                                                                     median: float | None) -> None:
    assert bench().median(values) == median


def test_the_table_gives_per_mutant_and_mode_the_median_and_each_seed() -> None:
    run = {"mutant": "m", "mode": "random", "error": None, "other_findings": [["stranded"]], "steps": 20}
    runs = [{**run, "seed": 1, "trials_to_find": 4}, {**run, "seed": 2, "trials_to_find": None},
            {**run, "seed": 3, "trials_to_find": 8, "other_findings": []},
            {**run, "mode": "plan", "seed": 1, "trials_to_find": None, "other_findings": [], "steps": 30},
            {**run, "mode": "plan", "seed": 2, "error": "no search.json"}]
    lines = bench().table(runs).splitlines()
    assert lines[2] == "| m | random | 3 | 2 | 8 | s1: 4, s2: not in 20, s3: 8 | 1: stranded |"
    assert lines[3] == "| m | plan | 1 | 0 | - | s1: not in 30 | 0 |"
    assert len(lines) == 4


def test_each_run_searches_the_patched_build_against_the_released_one() -> None:
    b = bench()
    m = b.load()[0]
    opts = argparse.Namespace(controls=3, kinds="all", budget="10m", nodes=10, pods=40, max_trials=None,
                              include_known=False, base_patch=None)
    argv = b.search_argv(m, "random", 2, Path("/o"), Path("/s"), opts)
    assert argv[1:5] == ["search", "--scheduler", "yunikorn", "--yunikorn-patch"] and argv[5] == m.patch
    assert argv[argv.index("--control") + 1] == "build:released" and "--include-known" not in argv
    assert argv[argv.index("--seed") + 1] == "2" and "--plan" not in argv and "--max-trials" not in argv
    planned = b.search_argv(m, "plan", 2, Path("/o"), Path("/s"), argparse.Namespace(**{**vars(opts),
                                                                                       "max_trials": 30, "include_known": True}))
    assert planned[-1] == "--plan" and planned[planned.index("--max-trials") + 1] == "30" and "--include-known" in planned
    with pytest.raises(ValueError, match="mode 'guess'"):
        b.search_argv(m, "guess", 2, Path("/o"), Path("/s"), opts)


FIXED_BASE = ROOT / "patches" / "yunikorn" / "3355-forget-pod-reverts-with-expiry.patch"


def test_a_mutant_on_a_base_is_both_patches_in_one_and_is_controlled_by_the_base(tmp_path: Path) -> None:
    b = bench()
    m = b.load()[0]
    base = b.base_patch("3355-forget-pod-reverts-with-expiry")  # a shipped patch's name finds it
    assert base == str(FIXED_BASE.resolve())
    opts = argparse.Namespace(controls=3, kinds="all", budget="10m", nodes=10, pods=40, max_trials=None,
                              include_known=False, base_patch=base)
    patch = b.planted(m, base, tmp_path / "patches")
    assert patch == str(tmp_path / "patches" / f"3355-forget-pod-reverts-with-expiry+{m.name}.patch")
    text = Path(patch).read_text()
    assert FIXED_BASE.read_text() in text and Path(m.patch).read_text() in text
    assert text.index(FIXED_BASE.read_text()) < text.index(Path(m.patch).read_text())  # the base first
    argv = b.search_argv(m, "plan", 1, tmp_path / "o", tmp_path / "s", opts, patch)
    assert argv[argv.index("--yunikorn-patch") + 1] == patch
    assert argv[argv.index("--control") + 1] == f"build:patch={base}" and argv[-1] == "--plan"
    assert b.planted(m, None, tmp_path / "none") == m.patch and not (tmp_path / "none").exists()  # no base: as before
    assert b.base_name(base) == "3355-forget-pod-reverts-with-expiry" and b.base_name(None) is None


@pytest.mark.parametrize("mutant", [m.name for m in bench().load()])
def test_each_shipped_mutant_patches_files_the_fixed_base_does_not(mutant: str, tmp_path: Path) -> None:
    """The fixed base and the mutant touch different files, so on top of the base each of the mutant's hunks meets
    the v1.9.0 lines it was written against (the record says each applies to v1.9.0). A mutant that touches a file
    the base changes must be checked on the source and, if need be, rebased into a variant for the base."""
    from kube_fault_proxy.rig.cluster import patches

    b = bench()
    m = next(x for x in b.load() if x.name == mutant)
    base_files = {fp.path for fp in patches.parse(FIXED_BASE.read_text(), str(FIXED_BASE))}
    mutant_files = {fp.path for fp in patches.parse(Path(m.patch).read_text(), m.patch)}
    assert mutant_files and not mutant_files & base_files
    combined = b.planted(m, str(FIXED_BASE), tmp_path)
    sections = [fp.path for fp in patches.parse(Path(combined).read_text(), combined)]
    assert sections == [fp.path for p in (FIXED_BASE, Path(m.patch)) for fp in patches.parse(p.read_text(), str(p))]


@pytest.mark.parametrize(("given", "said"), [
    ("{tmp}/gone.patch", "--base-patch {tmp}/gone.patch: cannot read {tmp}/gone.patch"),
    ("{tmp}/notes.patch", "--base-patch {tmp}/notes.patch: not a patch: {tmp}/notes.patch: no unified diff in it"),
])
def test_a_bad_base_patch_is_refused_before_any_run(given: str, said: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.patch").write_text("Only words.\n")
    results = tmp_path / "results.json"
    code = bench().main(["run", "--base-patch", given.format(tmp=tmp_path), "--results", str(results),
                         "-o", str(tmp_path / "runs")])
    assert code == 2 and said.format(tmp=tmp_path) in capsys.readouterr().err
    assert not results.exists() and not (tmp_path / "runs").exists()


def test_the_table_keeps_a_mutant_on_a_base_apart_from_it_on_the_release() -> None:
    run = {"mutant": "m", "mode": "random", "error": None, "other_findings": [], "steps": 9, "seed": 1}
    lines = bench().table([{**run, "trials_to_find": None}, {**run, "base": "fix", "trials_to_find": 3}]).splitlines()
    assert lines[2:] == ["| m | random | 1 | 0 | - | s1: not in 9 | 0 |", "| m on fix | random | 1 | 1 | 3 | s1: 3 | 0 |"]


def test_the_table_keeps_runs_that_could_perform_actions_apart() -> None:
    run = {"mutant": "m", "mode": "plan", "error": None, "other_findings": [], "steps": 4, "seed": 1}
    lines = bench().table([{**run, "trials_to_find": None, "settings": {"actions": None}},
                           {**run, "trials_to_find": 2, "settings": {"actions": "all"}}]).splitlines()
    assert lines[2:] == ["| m | plan | 1 | 0 | - | s1: not in 4 | 0 |", "| m | plan, actions all | 1 | 1 | 2 | s1: 2 | 0 |"]


CLOSING_BASE = ROOT / "patches" / "yunikorn" / "3355-closing-fix+bind-committed-without-answer.patch"


def test_a_mutant_rebased_for_a_base_is_planted_there_and_its_own_patch_elsewhere(tmp_path: Path) -> None:
    b = bench()
    m = next(x for x in b.load() if x.name == "bind-conflict-taken-as-bound")
    rebased = m.bases[CLOSING_BASE.stem]
    assert Path(rebased).is_file() and Path(rebased).parent == Path(m.patch).parent  # beside the mutant's own
    on_closing = Path(b.planted(m, str(CLOSING_BASE), tmp_path))
    assert on_closing.name == f"{CLOSING_BASE.stem}+{m.name}.patch"
    assert Path(rebased).read_text() in on_closing.read_text() and Path(m.patch).read_text() not in on_closing.read_text()
    on_expiry = Path(b.planted(m, str(FIXED_BASE), tmp_path))
    assert Path(m.patch).read_text() in on_expiry.read_text()  # no rebased patch for that base: its own


def test_the_rebased_mutant_changes_the_lines_as_the_base_left_them() -> None:
    """The base changes the Binding's error branch (boundDespite); the mutant's own hunk expects the v1.9.0 lines
    there, so it does not apply over the base, and the rebased one expects the base's lines."""
    from kube_fault_proxy.rig.cluster import patches

    def hunks(path: Path) -> list[patches.Hunk]:
        return [h for fp in patches.parse(path.read_text(), str(path)) if fp.path == "pkg/cache/task.go"
                for h in fp.hunks]

    def within(part: list[str], whole: list[str]) -> bool:
        return any(whole[i:i + len(part)] == part for i in range(len(whole) - len(part) + 1))

    b = bench()
    m = next(x for x in b.load() if x.name == "bind-conflict-taken-as-bound")
    base_branch = hunks(CLOSING_BASE)[0]
    own, rebased = hunks(Path(m.patch))[1], hunks(Path(m.bases[CLOSING_BASE.stem]))[1]
    removed = [x[1:] for x in base_branch.lines if x[0] == "-"]
    assert removed and set(own.old) & set(removed)  # it expects lines the base takes away
    assert not within(own.old, base_branch.new)
    assert within(rebased.old, base_branch.new) and any("apierrors.IsConflict(err)" in x for x in rebased.new)
