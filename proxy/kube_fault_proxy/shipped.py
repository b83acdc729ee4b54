"""What the package ships beside its code (the profile library, scenarios, YuniKorn patches), and how names find it.

Installed from the wheel, these files live in the package; in a checkout, `fault_profiles/`, `scenarios/` and
`patches/` at the top are links to the same files."""

from __future__ import annotations

from pathlib import Path

HOME = Path(__file__).resolve().parent
PROFILES = HOME / "fault_profiles"
SCENARIOS = HOME / "scenarios"
PATCHES = HOME / "patches"
LOCAL_PROFILES = Path("fault_profiles")  # a library of one's own, beside where the command runs


def profiles_dir(given: Path | None) -> Path:
    """The profile library a command uses: `--profiles DIR` when given; else `./fault_profiles` when it is a
    directory; else the library the package ships."""
    if given is not None:
        return given
    return LOCAL_PROFILES if LOCAL_PROFILES.is_dir() else PROFILES


def _by_name(given: Path, shipped: Path, suffix: str) -> Path:
    if given.exists() or given.parent != Path("."):
        return given
    for candidate in (shipped / given.name, shipped / f"{given.name}{suffix}"):
        if candidate.is_file():
            return candidate
    return given


def scenario(given: Path) -> Path:
    """A scenario file: a path that exists, else a shipped scenario by name (`yunikorn-3355` or `….yaml`)."""
    return _by_name(given, SCENARIOS, ".yaml")


def yunikorn_patch(given: Path) -> Path:
    """A YuniKorn patch: a path that exists, else a shipped patch by name (`3355-forget-pod-reverts` or `….patch`)."""
    return _by_name(given, PATCHES / "yunikorn", ".patch")


def names(directory: Path, suffix: str) -> list[str]:
    """The names of the shipped files in one of the directories above, without their suffix."""
    return sorted(p.name.removesuffix(suffix) for p in directory.glob(f"*{suffix}"))
