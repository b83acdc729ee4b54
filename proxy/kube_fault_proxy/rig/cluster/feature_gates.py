"""Feature gates per component: `component:Gate=bool` as users write them, and each binary's --feature-gates.

A build plus its gates is what a report calls the target: `kube-scheduler v1.36.3 SchedulerAsyncAPICalls=true`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
_GATE = re.compile(r"[A-Z][A-Za-z0-9]*")
_BOOLS = {"true": True, "false": False}

Gates = dict[str, dict[str, bool]]  # component -> gate -> on


def parse(text: str) -> tuple[str, str, bool]:
    """`kube-scheduler:SchedulerAsyncAPICalls=true` -> (component, gate, on); ValueError names what is wrong."""
    component, colon, setting = text.partition(":")
    gate, equals, value = setting.partition("=")
    if not colon or not equals:
        raise ValueError(f"{text!r} is not component:Gate=true|false "
                         "(e.g. kube-scheduler:SchedulerAsyncAPICalls=true)")
    if component not in COMPONENTS:
        raise ValueError(f"{text!r}: unknown component {component!r} (one of {', '.join(COMPONENTS)})")
    if not _GATE.fullmatch(gate):
        raise ValueError(f"{text!r}: {gate!r} is not a feature gate name (letters and digits, an upper-case first)")
    if value.lower() not in _BOOLS:
        raise ValueError(f"{text!r}: {value!r} is not true or false")
    return component, gate, _BOOLS[value.lower()]


def collect(settings: Iterable[str | tuple[str, str, bool]]) -> Gates:
    """Settings (text or parsed) as component -> gate -> on; the same gate set twice differently is an error."""
    out: Gates = {}
    for setting in settings:
        component, gate, on = parse(setting) if isinstance(setting, str) else setting
        had = out.setdefault(component, {}).get(gate)
        if had is not None and had != on:
            raise ValueError(f"{component}:{gate} is set both true and false")
        out[component][gate] = on
    return out


def flag(gates: Mapping[str, Mapping[str, bool]], component: str) -> list[str]:
    """The binary's `--feature-gates=A=true,B=false` (sorted), or nothing when none is set for it."""
    mine = gates.get(component) or {}
    if not mine:
        return []
    return ["--feature-gates=" + ",".join(f"{g}={'true' if on else 'false'}" for g, on in sorted(mine.items()))]


def describe(gates: Mapping[str, Mapping[str, bool]], component: str) -> str:
    """A component's gates as a report shows them beside its build: `A=true B=false` (empty when none)."""
    return " ".join(f"{g}={'true' if on else 'false'}" for g, on in sorted((gates.get(component) or {}).items()))


def target(build: str, gates: Mapping[str, Mapping[str, bool]], component: str) -> str:
    """A build plus its gates: `kube-scheduler v1.36.3 SchedulerAsyncAPICalls=true`."""
    shown = describe(gates, component)
    return f"{build} {shown}" if shown else build


# Reading a release's gates from its Go source. A gate is declared as `Name featuregate.Feature = "Name"` (or
# `Name = featuregate.Feature("Name")`; client-go's own `Feature` type alike), and k8s.io/kubernetes registers
# each one its binaries accept as a key of one map in pkg/features/kube_features.go: its own gates by name, the
# staging modules' (apiserver, apiextensions, controller-manager, zpages) as `package.Name`.
_DECLARED = re.compile(r'^\s*(\w+)\s+(?:featuregate\.)?Feature\s*=\s*"(\w+)"'
                       r'|^\s*(\w+)\s*=\s*featuregate\.Feature\("(\w+)"\)', re.M)
# In a const block a gate may also be an untyped string (`Name = "Name"`); only the registry's own keys are
# resolved through these, so another string constant of the file does no harm.
_UNTYPED = re.compile(r'^\t(\w+)\s*=\s*"(\w+)"', re.M)
REGISTRY = "defaultVersionedKubernetesFeatureGates"
_KEY = re.compile(r"^\t(?:(\w+)\.)?(\w+):\s*\{", re.M)


def declared(go_source: str) -> dict[str, str]:
    """The feature gates a Go file declares with their type: identifier -> gate name."""
    return {m.group(1) or m.group(3): m.group(2) or m.group(4) for m in _DECLARED.finditer(go_source)}


def registered(kube_features: str, where: str = "pkg/features/kube_features.go") -> set[str]:
    """The gate names k8s.io/kubernetes registers (the keys of its `defaultVersionedKubernetesFeatureGates`).

    A key of its own is resolved through the file's declarations; a staging module's `package.Name` is taken
    as `Name` (each staging module declares `Name featuregate.Feature = "Name"`). ValueError if the map is
    missing or a key of its own is not declared: the file's layout changed, and guessing would hide gates."""
    start = re.search(rf"^var {REGISTRY}\s*=\s*map\[featuregate\.Feature\]featuregate\.VersionedSpecs\{{$",
                      kube_features, re.M)
    if start is None:
        raise ValueError(f"{where}: no `var {REGISTRY} = map[featuregate.Feature]featuregate.VersionedSpecs{{`")
    end = re.search(r"^\}$", kube_features[start.end():], re.M)
    body = kube_features[start.end(): start.end() + end.start() if end else len(kube_features)]
    own = {**{m.group(1): m.group(2) for m in _UNTYPED.finditer(kube_features)}, **declared(kube_features)}
    names = set()
    for m in _KEY.finditer(body):
        package, ident = m.group(1), m.group(2)
        if package is None and ident not in own:
            line = kube_features.count("\n", 0, start.end() + m.start()) + 2
            raise ValueError(f"{where}:{line}: {REGISTRY} registers {ident}, which the file does not declare")
        names.add(own[ident] if package is None else ident)
    return names


def known(kube_features: Path, others: Iterable[Path] = ()) -> frozenset[str]:
    """Every gate a release's kube-apiserver, kube-controller-manager and kube-scheduler accept: those its
    pkg/features/kube_features.go registers, plus those `others` declare (client-go's features, component-base's
    logging gates and AllAlpha/AllBeta, which the binaries add to the same --feature-gates)."""
    names = registered(kube_features.read_text(), str(kube_features))
    for path in others:
        names |= set(declared(path.read_text()).values())
    return frozenset(names)


def check(gates: Mapping[str, Mapping[str, bool]], release: str, names: frozenset[str]) -> None:
    """ValueError naming each gate set that the release does not have (its binaries would refuse to start)."""
    unknown = sorted(f"{component}:{gate}" for component, mine in gates.items() for gate in mine
                     if gate not in names)
    if unknown:
        raise ValueError(f"Kubernetes {release} has no feature gate {', '.join(unknown)} "
                         f"({len(names)} gates read from its source: pkg/features/kube_features.go, client-go, "
                         "component-base)")
