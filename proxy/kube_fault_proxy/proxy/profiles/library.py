"""The named profiles the proxy knows: loaded from a directory, added and removed at run time."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kube_fault_proxy.proxy.profiles.loader import Problem, ProfileError, load_file
from kube_fault_proxy.proxy.profiles.profile import FaultProfile

PASS_THROUGH = "pass-through"


@dataclass(frozen=True, slots=True)
class Entry:
    """A profile and where it came from (a file path, or 'api')."""

    profile: FaultProfile
    source: str


def load_dir(directory: Path) -> dict[str, Entry]:
    """Every *.yaml / *.yml profile in a directory; any bad file fails the whole load."""
    entries: dict[str, Entry] = {}
    problems: list[Problem] = []
    if not directory.is_dir():
        raise ProfileError([Problem(str(directory), None, None, "", "not a directory")])
    for path in sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]):
        try:
            profile = load_file(path)
        except ProfileError as e:
            problems += e.problems
            continue
        if profile.name in entries:
            problems.append(
                Problem(str(path), None, None, "metadata.name",
                        f"profile {profile.name!r} is also defined in {entries[profile.name].source}")
            )
            continue
        entries[profile.name] = Entry(profile, str(path))
    if problems:
        raise ProfileError(problems)
    return entries


class Library:
    """Profiles by name; replacing or removing one never touches the active activation."""

    def __init__(self, entries: dict[str, Entry] | None = None) -> None:
        self._entries: dict[str, Entry] = dict(entries or {})

    def names(self) -> list[str]:
        """Profile names, sorted."""
        return sorted(self._entries)

    def get(self, name: str) -> Entry | None:
        """The entry for a name, or None."""
        return self._entries.get(name)

    def put(self, profile: FaultProfile, source: str) -> bool:
        """Add or replace; True when it replaced an existing profile."""
        replaced = profile.name in self._entries
        self._entries[profile.name] = Entry(profile, source)
        return replaced

    def delete(self, name: str) -> bool:
        """Remove; False when there was no such profile."""
        return self._entries.pop(name, None) is not None

    def __len__(self) -> int:
        return len(self._entries)
