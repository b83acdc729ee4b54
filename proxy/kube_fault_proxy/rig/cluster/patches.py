"""Unified diffs: parsed strictly and applied to a source tree all or nothing; errors name the
patch file, the file it patches and the hunk."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
NO_NEWLINE = "\\ No newline at end of file"


class PatchError(ValueError):
    """The patch is malformed or does not apply; the message names the patch, the file and the hunk."""


@dataclass(frozen=True)
class Hunk:
    """One `@@ -a,b +c,d @@` block: its lines keep their ' ', '-' or '+' mark."""

    header: str
    line: int  # where it starts in the patch file
    old_start: int
    new_start: int
    lines: tuple[str, ...]
    old_eof_newline: bool = True
    new_eof_newline: bool = True

    @property
    def old(self) -> list[str]:
        """The lines the file must have (context and removed)."""
        return [x[1:] for x in self.lines if x[0] in " -"]

    @property
    def new(self) -> list[str]:
        """The lines it has afterwards (context and added)."""
        return [x[1:] for x in self.lines if x[0] in " +"]


@dataclass(frozen=True)
class FilePatch:
    """The hunks for one file; a path of None is /dev/null (the file is created or deleted)."""

    old_path: str | None
    new_path: str | None
    hunks: tuple[Hunk, ...]

    @property
    def path(self) -> str:
        """The file this patches."""
        return self.new_path or self.old_path or ""


def _path(raw: str, where: str) -> str | None:
    name = raw.split("\t")[0].strip()
    if name == "/dev/null":
        return None
    if name.startswith(("a/", "b/")):
        name = name[2:]
    p = PurePosixPath(name)
    if not name or p.is_absolute() or ".." in p.parts:
        raise PatchError(f"{where}: {name!r} is not a path inside the source tree")
    return str(p)


def parse(text: str, name: str) -> list[FilePatch]:
    """Every file section of a unified diff; anything before the first `---` is commentary."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    out: list[FilePatch] = []
    i = 0
    while i < len(lines):
        if not (lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
            i += 1
            continue
        old, new = _path(lines[i][4:], f"{name}:{i + 1}"), _path(lines[i + 1][4:], f"{name}:{i + 2}")
        if old is not None and new is not None and old != new:
            raise PatchError(f"{name}:{i + 1}: renames ({old} to {new}) are not supported")
        i += 2
        hunks: list[Hunk] = []
        while i < len(lines) and lines[i].startswith("@@"):
            hunk, i = _hunk(lines, i, name, len(hunks) + 1, old or new or "")
            hunks.append(hunk)
        if not hunks:
            raise PatchError(f"{name}:{i + 1}: the section for {new or old} has no @@ hunk")
        out.append(FilePatch(old, new, tuple(hunks)))
    if not out:
        raise PatchError(f"{name}: no unified diff in it (no '--- a/FILE' / '+++ b/FILE' / '@@' lines)")
    return out


def check_file(path: Path, what: str) -> None:
    """A patch file an option names, read and parsed before anything is built. ValueError says `what` (the option
    and the value given), then why: `what: cannot read PATH (...)` or `what: not a patch: ...`."""
    try:
        parse(path.read_text(), str(path))
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{what}: cannot read {path} ({e})") from None
    except PatchError as e:
        raise ValueError(f"{what}: not a patch: {e}") from None


def _hunk(lines: list[str], i: int, name: str, number: int, path: str) -> tuple[Hunk, int]:
    m = HUNK_HEADER.match(lines[i])
    if m is None:
        raise PatchError(f"{name}:{i + 1}: hunk {number} of {path}: malformed header {lines[i]!r}")
    old_len = int(m.group(2)) if m.group(2) is not None else 1
    new_len = int(m.group(4)) if m.group(4) is not None else 1
    start, header = i + 1, lines[i]
    i += 1
    body: list[str] = []
    old_left, new_left = old_len, new_len
    eof = {"old": True, "new": True}
    while old_left > 0 or new_left > 0:
        if i >= len(lines):
            raise PatchError(f"{name}:{start}: hunk {number} of {path} ({header}) ends early: "
                             f"{old_left} old and {new_left} new lines missing")
        line = lines[i] if lines[i] else " "  # an editor may strip an empty context line's space
        mark = line[0]
        if mark == "\\":
            i += 1
            continue
        if mark not in " -+":
            raise PatchError(f"{name}:{i + 1}: hunk {number} of {path} ({header}): a line starting with {mark!r} "
                             f"where ' ', '-' or '+' belongs (the @@ counts may be wrong)")
        if mark in " -":
            old_left -= 1
        if mark in " +":
            new_left -= 1
        if old_left < 0 or new_left < 0:
            raise PatchError(f"{name}:{i + 1}: hunk {number} of {path} ({header}): more lines than its @@ counts")
        body.append(line)
        i += 1
    while i < len(lines) and lines[i].startswith("\\"):  # "\ No newline at end of file" after the last line
        i += 1
        last = body[-1][0] if body else " "
        if last in " -":
            eof["old"] = False
        if last in " +":
            eof["new"] = False
    return Hunk(header, start, int(m.group(1)), int(m.group(3)), tuple(body), eof["old"], eof["new"]), i


def _find(content: list[str], want: list[str], near: int, floor: int) -> int | None:
    """Where `want` occurs in content, the nearest to `near` at or after `floor` (no fuzz)."""
    if not want:
        return max(floor, min(near, len(content)))
    for delta in range(len(content) + 1):
        for pos in (near - delta, near + delta) if delta else (near,):
            if floor <= pos <= len(content) - len(want) and content[pos:pos + len(want)] == want:
                return pos
    return None


def _mismatch(content: list[str], hunk: Hunk, at: int, path: str) -> str:
    for k, expected in enumerate(hunk.old):
        actual = content[at + k] if 0 <= at + k < len(content) else None
        if actual != expected:
            got = "past the end of the file" if actual is None else f"{actual!r}"
            return f"line {at + k + 1} of {path} is {got}; the patch expects {expected!r}"
    return "its context is not there"


def _apply_file(fp: FilePatch, before: str | None, name: str, where: Path) -> str | None:
    """The file's text after its section (None: the file is gone); `before` is None if it does not exist."""
    n = len(fp.hunks)
    if fp.old_path is None:
        if before is not None:
            raise PatchError(f"{name}: hunk 1 of {n} for {fp.path} creates the file, but it exists already")
        before = ""
    elif before is None:
        raise PatchError(f"{name}: hunk 1 of {n} for {fp.path}: the file does not exist in {where}")
    newline = before.endswith("\n") or not before
    content = before.split("\n")
    if newline:
        content.pop()
    offset, floor = 0, 0
    for k, hunk in enumerate(fp.hunks, 1):
        near = max(hunk.old_start - 1 + offset, 0) if hunk.old else hunk.old_start + offset
        at = _find(content, hunk.old, near, floor)
        if at is None:
            done = _find(content, hunk.new, near, floor) is not None and hunk.new != hunk.old
            raise PatchError(
                f"{name}: hunk {k} of {n} for {fp.path} (patch line {hunk.line}, {hunk.header}) does not apply: "
                f"{_mismatch(content, hunk, near, fp.path)}" + (" (already applied?)" if done else ""))
        content[at:at + len(hunk.old)] = hunk.new
        offset += len(hunk.new) - len(hunk.old)
        floor = at + len(hunk.new)
        if at + len(hunk.new) == len(content):
            newline = hunk.new_eof_newline
    if fp.new_path is None:
        if content:
            raise PatchError(f"{name}: hunk {n} of {n} for {fp.path} deletes the file, but lines remain")
        return None
    return "\n".join(content) + ("\n" if newline and content else "")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (FileNotFoundError, NotADirectoryError):
        return None


def apply(patch: Path, root: Path) -> list[str]:
    """Apply a patch file to the tree at root: every hunk or none; returns the files it changed.

    Sections apply in order, so a file may have several (two patches for one file, concatenated)."""
    try:
        text = patch.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise PatchError(f"{patch}: cannot read it ({e})") from None
    files: dict[str, str | None] = {}  # everything is checked in memory before anything is written
    for fp in parse(text, str(patch)):
        before = files[fp.path] if fp.path in files else _read(root / fp.path)
        files[fp.path] = _apply_file(fp, before, str(patch), root)
    for path, content in files.items():
        target = root / path
        if content is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
    return list(files)


def combine(parts: list[Path], directory: Path, name: str | None = None) -> Path:
    """One patch that is `parts` in order, written to `directory` as `<name>.patch` (default: the parts' names joined
    by `+`): its sections apply in order (apply), so a later part may patch a file an earlier one patched, at the
    lines as the earlier left them.

    Each part is read and parsed first (PatchError names the bad one). The file's bytes depend only on the parts'
    names and bytes, never on where they are, so the build it makes (named by the file's name and the hash of its
    bytes) is the same on every run and every machine."""
    if len(parts) < 2:
        raise ValueError("combine needs at least two patches")
    texts = []
    for part in parts:
        try:
            text = part.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise PatchError(f"{part}: cannot read it ({e})") from None
        parse(text, str(part))
        texts.append(text if text.endswith("\n") else text + "\n")
    names = [part.name.removesuffix(".patch").removesuffix(".diff") for part in parts]
    header = (f"These {len(parts)} patches in one, applied in this order (each section in turn): "
              f"{', '.join(names)}. Written by kube-fault-proxy (patches.combine).\n\n")
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / f"{name or '+'.join(names)}.patch"
    out.write_text(header + "\n".join(texts))
    return out
