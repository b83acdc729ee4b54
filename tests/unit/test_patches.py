"""Unified diffs applied to a tree: what applies, and errors that name the patch, the file and the hunk."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kube_fault_proxy.rig.cluster import patches

GO = "package a\n\nfunc one() int {\n\treturn 1\n}\n\nfunc two() int {\n\treturn 2\n}\n"

TWO_HUNKS = """A header: what this changes and why.
It may say anything, even mention a/file.go.

--- a/a.go
+++ b/a.go
@@ -3,3 +3,3 @@
 func one() int {
-\treturn 1
+\treturn 10
 }
@@ -7,3 +7,4 @@
 func two() int {
+\t// two
 \treturn 2
 }
"""


def tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "tree"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def patch_file(tmp_path: Path, text: str, name: str = "fix.patch") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize(("files", "diff", "after"), [
    pytest.param({"a.go": GO}, TWO_HUNKS, {"a.go": GO.replace("return 1", "return 10").replace(
        "func two() int {\n", "func two() int {\n\t// two\n")}, id="two hunks, header ignored"),
    pytest.param({"a.go": "// moved\n// down\n" + GO}, TWO_HUNKS, {"a.go": "// moved\n// down\n" + GO.replace(
        "return 1", "return 10").replace("func two() int {\n", "func two() int {\n\t// two\n")},
        id="hunks found at an offset"),
    pytest.param({}, "--- /dev/null\n+++ b/pkg/new.go\n@@ -0,0 +1,2 @@\n+package pkg\n+// new\n",
                 {"pkg/new.go": "package pkg\n// new\n"}, id="creates a file"),
    pytest.param({"old.go": "x\ny\n"}, "--- a/old.go\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-x\n-y\n", {},
                 id="deletes a file"),
    pytest.param({"a.txt": "x\ny"}, "--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n x\n-y\n\\ No newline at end of file\n"
                 "+z\n\\ No newline at end of file\n", {"a.txt": "x\nz"}, id="no newline at end of file"),
    pytest.param({"a.txt": "x\n\ny\n"}, "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n x\n\n-y\n+z\n",
                 {"a.txt": "x\n\nz\n"}, id="an empty context line whose space an editor stripped"),
    pytest.param({"a.txt": "a\nb\n"}, "--- a.txt\n+++ a.txt\n@@ -2,0 +3 @@\n+c\n", {"a.txt": "a\nb\nc\n"},
                 id="paths without a/ b/, a pure insertion, a count left out"),
])
def test_applies(tmp_path: Path, files: dict[str, str], diff: str, after: dict[str, str]) -> None:
    root = tree(tmp_path, files)
    root.mkdir(exist_ok=True)
    patches.apply(patch_file(tmp_path, diff), root)
    assert {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()} == after


BAD_CONTEXT = TWO_HUNKS.replace(" \treturn 2\n", " \treturn 3\n")


@pytest.mark.parametrize(("files", "diff", "message"), [
    pytest.param({"a.go": GO}, BAD_CONTEXT,
                 "fix.patch: hunk 2 of 2 for a.go (patch line 11, @@ -7,3 +7,4 @@) does not apply: "
                 "line 8 of a.go is '\\treturn 2'; the patch expects '\\treturn 3'", id="context differs"),
    pytest.param({"a.go": GO.replace("return 1", "return 10")}, TWO_HUNKS,
                 "fix.patch: hunk 1 of 2 for a.go (patch line 6, @@ -3,3 +3,3 @@) does not apply: "
                 "line 4 of a.go is '\\treturn 10'; the patch expects '\\treturn 1' (already applied?)",
                 id="already applied"),
    pytest.param({"b.go": GO}, TWO_HUNKS, "fix.patch: hunk 1 of 2 for a.go: the file does not exist in",
                 id="no such file"),
    pytest.param({"a.go": "x\n"}, "--- a/a.go\n+++ b/a.go\n@@ -1,1 +1,1 @@\n-y\n+z\n",
                 "fix.patch: hunk 1 of 1 for a.go (patch line 3, @@ -1,1 +1,1 @@) does not apply: "
                 "line 1 of a.go is 'x'; the patch expects 'y'", id="one-line file"),
    pytest.param({"a.go": GO}, "just prose\n", "fix.patch: no unified diff in it", id="not a diff"),
    pytest.param({"a.go": GO}, "--- a/a.go\n+++ b/a.go\n@@ -1 +1 @@ junk\n-x\n+y\n@@ bad @@\n",
                 "fix.patch:6: hunk 2 of a.go: malformed header '@@ bad @@'", id="malformed hunk header"),
    pytest.param({"a.go": GO}, "--- a/a.go\n+++ b/a.go\n@@ -1,3 +1,3 @@\n package a\n-\n",
                 "fix.patch:3: hunk 1 of a.go (@@ -1,3 +1,3 @@) ends early: 1 old and 2 new lines missing", id="hunk shorter than its counts"),
    pytest.param({"a.go": GO}, "--- a/a.go\n+++ b/a.go\n@@ -1,2 +1,2 @@\n package a\n*oops\n",
                 "fix.patch:5: hunk 1 of a.go (@@ -1,2 +1,2 @@): a line starting with '*'", id="stray line"),
    pytest.param({"a.go": GO}, "--- a/../../etc/passwd\n+++ b/../../etc/passwd\n@@ -1 +1 @@\n-x\n+y\n",
                 "fix.patch:1: '../../etc/passwd' is not a path inside the source tree", id="escapes the tree"),
    pytest.param({"a.go": GO}, "--- /dev/null\n+++ b/a.go\n@@ -0,0 +1 @@\n+x\n",
                 "fix.patch: hunk 1 of 1 for a.go creates the file, but it exists already", id="creates what exists"),
    pytest.param({"a.go": GO}, "--- a/a.go\n+++ b/a.go\n\n", "fix.patch:3: the section for a.go has no @@ hunk",
                 id="section without hunks"),
    pytest.param({"a.go": GO}, TWO_HUNKS + TWO_HUNKS.split("\n\n", 1)[1],
                 "fix.patch: hunk 1 of 2 for a.go (patch line 18, @@ -3,3 +3,3 @@) does not apply: line 4 of a.go "
                 "is '\\treturn 10'; the patch expects '\\treturn 1' (already applied?)",
                 id="the same change twice: the second section sees the first one's result"),
    pytest.param({"a.go": GO}, "--- a/a.go\n+++ b/b.go\n@@ -1 +1 @@\n-x\n+y\n",
                 "fix.patch:1: renames (a.go to b.go) are not supported", id="rename"),
])
def test_errors_name_the_patch_the_file_and_the_hunk(tmp_path: Path, files: dict[str, str], diff: str,
                                                     message: str) -> None:
    root = tree(tmp_path, files)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with pytest.raises(patches.PatchError) as e:
        patches.apply(patch_file(tmp_path, diff), root)
    assert message in str(e.value).replace(str(tmp_path) + "/", "")
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before  # nothing changed


def test_two_patches_for_one_file_concatenated(tmp_path: Path) -> None:
    root = tree(tmp_path, {"a.go": GO})
    second = "Another fix's header.\n\n--- a/a.go\n+++ b/a.go\n@@ -8,2 +8,2 @@\n \t// two\n-\treturn 2\n+\treturn 20\n"
    assert patches.apply(patch_file(tmp_path, TWO_HUNKS + second), root) == ["a.go"]
    assert (root / "a.go").read_text() == GO.replace("return 1", "return 10").replace(
        "func two() int {\n\treturn 2", "func two() int {\n\t// two\n\treturn 20")


def test_all_or_nothing_across_files(tmp_path: Path) -> None:
    root = tree(tmp_path, {"a.go": GO, "b.go": GO})
    good = TWO_HUNKS.split("\n\n", 1)[1]
    bad = BAD_CONTEXT.split("\n\n", 1)[1].replace("a.go", "b.go")
    with pytest.raises(patches.PatchError, match=r"hunk 2 of 2 for b\.go"):
        patches.apply(patch_file(tmp_path, good + bad), root)
    assert (root / "a.go").read_text() == GO  # the first file's good hunks were not written either


def test_an_unreadable_patch_is_named(tmp_path: Path) -> None:
    with pytest.raises(patches.PatchError, match=r"missing\.patch: cannot read it"):
        patches.apply(tmp_path / "missing.patch", tmp_path)


@pytest.mark.parametrize("name", sorted(p.name for p in (Path(__file__).parents[2] / "patches" / "yunikorn").glob("*.patch")))
def test_our_patches_parse_and_say_what_they_are(name: str) -> None:
    text = (Path(__file__).parents[2] / "patches" / "yunikorn" / name).read_text()
    sections = patches.parse(text, name)
    header = text.split("\n--- a/", 1)[0]
    # which suggestion of which bug report it implements: YUNIKORN-3355's, or one of ours in docs/ (it must exist)
    reports = re.findall(r"docs/[\w./-]+\.md", header)
    assert "suggest" in header and ("YUNIKORN-3355" in header or reports)
    assert all((Path(__file__).parents[2] / r).is_file() for r in reports), reports
    assert all(fp.old_path == fp.new_path and fp.path.startswith("pkg/") for fp in sections)


SECOND = "Another fix's header.\n\n--- a/a.go\n+++ b/a.go\n@@ -8,2 +8,2 @@\n \t// two\n-\treturn 2\n+\treturn 20\n"


def test_combined_patches_apply_in_order_and_name_both(tmp_path: Path) -> None:
    base, mutant = patch_file(tmp_path, TWO_HUNKS, "base.patch"), patch_file(tmp_path, SECOND, "bug.diff")
    combined = patches.combine([base, mutant], tmp_path / "out")
    assert combined == tmp_path / "out" / "base+bug.patch"
    assert combined.read_text().startswith("These 2 patches in one, applied in this order (each section in turn): "
                                           "base, bug.")
    root = tree(tmp_path, {"a.go": GO})
    assert patches.apply(combined, root) == ["a.go"]  # the second patches the lines as the first left them
    assert (root / "a.go").read_text() == GO.replace("return 1", "return 10").replace(
        "func two() int {\n\treturn 2", "func two() int {\n\t// two\n\treturn 20")
    with pytest.raises(patches.PatchError, match=r"hunk 1 of 1 for a\.go .* does not apply"):  # the other order
        patches.apply(patches.combine([mutant, base], tmp_path / "out"), tree(tmp_path / "again", {"a.go": GO}))


def test_a_combined_patch_is_the_same_bytes_wherever_its_parts_are(tmp_path: Path) -> None:
    here = patches.combine([patch_file(tmp_path, TWO_HUNKS, "base.patch"), patch_file(tmp_path, SECOND, "bug.patch")],
                           tmp_path / "one")
    (tmp_path / "elsewhere").mkdir()
    there = patches.combine([patch_file(tmp_path / "elsewhere", TWO_HUNKS, "base.patch"),
                             patch_file(tmp_path / "elsewhere", SECOND, "bug.patch")], tmp_path / "two")
    assert here.read_bytes() == there.read_bytes() and str(tmp_path) not in here.read_text()


def test_a_combination_refuses_a_part_that_is_no_patch_and_a_single_part(tmp_path: Path) -> None:
    base = patch_file(tmp_path, TWO_HUNKS, "base.patch")
    with pytest.raises(patches.PatchError, match=r"notes\.patch: no unified diff in it"):
        patches.combine([base, patch_file(tmp_path, "just words\n", "notes.patch")], tmp_path / "out")
    with pytest.raises(patches.PatchError, match=r"gone\.patch: cannot read it"):
        patches.combine([base, tmp_path / "gone.patch"], tmp_path / "out")
    with pytest.raises(ValueError, match="at least two"):
        patches.combine([base], tmp_path / "out")
    assert not (tmp_path / "out").exists()
